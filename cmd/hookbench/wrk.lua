-- wrk script for hookgate's ingest: each wrk thread replays its own file of
-- requests signed in advance by `hookbench -wrk-requests` (see wrk.sh), so
-- the client's work per request is a table lookup.
-- Usage: WRK_REQUESTS=prefix [WRK_MARKER=prefix] wrk -t2 -c64 -d30s --latency -s wrk.lua URL
-- reads prefix1.txt, prefix2.txt, … (one per thread); with WRK_MARKER it
-- creates <marker>started at the first request and <marker>done at the end.
local prefix, marker = os.getenv("WRK_REQUESTS"), os.getenv("WRK_MARKER")
local counter = 1
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

function init(args)
  reqs = {}
  for line in io.lines(prefix .. id .. ".txt") do
    local wid, ts, sig, body = line:match("^([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$")
    reqs[#reqs + 1] = wrk.format("POST", nil, {
      ["Content-Type"] = "application/json",
      ["webhook-id"] = wid,
      ["webhook-timestamp"] = ts,
      ["webhook-signature"] = sig,
    }, body)
  end
  i = 0
end

function request()
  if i == 0 and marker then
    local f = io.open(marker .. "started", "w")
    if f then f:close() end
  end
  i = i + 1
  if i > #reqs then
    i = 1 -- out of requests: from here on they are retries, and wrk.sh says so
  end
  return reqs[i]
end

function done(summary, latency, requests)
  if not marker then
    return
  end
  local f = io.open(marker .. "done", "w")
  if f then f:close() end
end
