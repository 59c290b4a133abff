package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/internal/testsupport"
)

// /metrics is on the admin listener without a token, so anyone who can
// reach that listener (every tenant with a token can) reads it; the logs
// go to the operator's log pipeline. Neither may carry a secret, a token,
// a credential from an endpoint's URL or static headers, a signature
// header's value, or event payload bytes. TestSecuritySecretsNeverLeak
// scans the logs for the secrets; this test adds the payloads, the
// signature header values, the static header values and the URL
// credentials (in the query and in the path, as in Slack-style URLs), and
// scans /metrics as well.
func TestLogsAndMetricsCarryNoPayloadOrCredential(t *testing.T) {
	rcv := newReceiver(t)
	rcv.failAt("fail/PATHCRED7y6t5r", true)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - id: ok-ep
    tenant: acme
    url: %q
    headers: {X-Static-Auth: STATICHDR9k8j7h}
  - id: failing-ep
    tenant: acme
    url: %q
    headers: {X-Static-Auth: STATICHDR9k8j7h}
    retry: {initial_interval: 10ms, max_interval: 20ms, max_attempts: 2, max_elapsed: 1m}
  - id: refused-ep
    tenant: acme
    url: "http://127.0.0.1:1/hook?access_token=QUERYCRED2w3e4r"
    retry: {initial_interval: 10ms, max_interval: 20ms, max_attempts: 2, max_elapsed: 1m}
  - id: globex-ep
    tenant: globex
    url: %q
`, rcv.url("ok?access_token=QUERYCRED2w3e4r"), rcv.url("fail/PATHCRED7y6t5r?access_token=QUERYCRED2w3e4r"), rcv.url("globex"))})

	// A signed event, its resend, and one with a wrong signature.
	body := []byte(`{"type":"invoice.paid","card":"PAYLOADMARK1q2w3e"}`)
	hdr := signSW("msg_leak1", time.Now(), body)
	hdr["Authorization"] = "Bearer INBOUNDAUTH5t6y7u"
	for range 2 {
		if st, _, b := g.post("sw", body, hdr); st != 202 {
			t.Fatalf("signed ingest: %d %s", st, b)
		}
	}
	bad := signSW("msg_leak2", time.Now(), body)
	bad["webhook-signature"] = "v1,BADSIGVALUEz9x8c7v6b5n4m3=="
	if st, _, b := g.post("sw", []byte(`{"card":"PAYLOADMARK4r5t6y"}`), bad); st != 401 {
		t.Fatalf("badly signed ingest: %d %s", st, b)
	}
	if st, _, b := g.post("open", []byte(`{"id":"o1","type":"t","card":"PAYLOADMARK7u8i9o"}`), nil); st != 202 {
		t.Fatalf("unsigned ingest: %d %s", st, b)
	}
	if st, _, b := g.post("other", []byte(`{"card":"PAYLOADMARK0p9o8i"}`), nil); st != 202 {
		t.Fatalf("globex ingest: %d %s", st, b)
	}
	// Published through the admin API, and wrong tokens.
	must[map[string]any](t, 202)(g.api("POST", "/events", acmeToken, jsonMap{"source": "open", "type": "t",
		"payload": jsonMap{"card": "PAYLOADMARK3e4r5t"}}))
	wantProblem(t, "wrong token", 401, "")(g.api("GET", "/events", "acme-tokeX", nil))
	wantProblem(t, "wrong token", 401, "")(g.api("GET", "/events", "operator-tokenn", nil))

	// Every acme event reaches ok-ep, fails for good at the other two.
	testsupport.WaitFor(t, 20*time.Second, "deliveries to end", func() bool {
		ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?limit=1000", opToken, nil)).Data
		done := 0
		for _, d := range ds {
			if d.State == "succeeded" || d.State == "failed" {
				done++
			}
		}
		return len(ds) == 10 && done == 10 // 3 acme events x 3 endpoints + 1 globex
	})

	resp, err := http.Get("http://" + g.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metricsText, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metricsText), `hookgate_delivery_attempts_total{endpoint="failing-ep"`) {
		t.Fatalf("/metrics shows no attempt of failing-ep; the session does not exercise it:\n%s", metricsText)
	}
	logs := g.logs.String()
	if !strings.Contains(logs, "delivery failed") {
		t.Fatalf("no failed delivery was logged; the session does not exercise the logs:\n%s", logs)
	}
	forbidden := []string{
		"PAYLOADMARK", "QUERYCRED2w3e4r", "PATHCRED7y6t5r", "STATICHDR9k8j7h", "INBOUNDAUTH5t6y7u",
		"BADSIGVALUEz9x8c7v6b5n4m3", hdr["webhook-signature"], strings.TrimPrefix(hdr["webhook-signature"], "v1,"),
		testSecret, strings.TrimPrefix(testSecret, "whsec_"), opToken, acmeToken, "acme-tokeX", "operator-tokenn",
	}
	for _, f := range forbidden {
		if strings.Contains(logs, f) {
			t.Errorf("the logs contain %q", f)
		}
		if strings.Contains(string(metricsText), f) {
			t.Errorf("/metrics contains %q", f)
		}
	}
	// Endpoint secrets too (generated: read them back).
	for _, id := range []string{"ok-ep", "failing-ep", "refused-ep", "globex-ep"} {
		ep := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/"+id, opToken, nil))
		for _, s := range []string{ep.Secret, strings.TrimPrefix(ep.Secret, "whsec_")} {
			if strings.Contains(logs, s) || strings.Contains(string(metricsText), s) {
				t.Errorf("endpoint %s's secret is in the logs or /metrics", id)
			}
		}
	}
}
