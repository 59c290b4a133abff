package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/internal/testsupport"
	"hookgate/outbound"
)

// Signing secrets of the endpoints that receive operational events.
const (
	opsSecret   = "whsec_b3BzLXNlY3JldC1vZi10aGUtYWNtZS10ZW5hbnQ="
	alertSecret = "whsec_YWxlcnQtc2VjcmV0LW9mLXRoZS1vcGVyYXRvciE="
)

// noticeGateway runs a gateway whose tenant acme has an endpoint that
// answers 410 (gone, type a), one that always fails (flaky, type b, two
// attempts), one subscribed to operational events (ops), one to every
// event type (everything: no operational events, those are asked for by
// name), and whose tenant globex has its own subscriber (globex-ops);
// alerts.url receives every tenant's.
func noticeGateway(t *testing.T) (*gw, *receiver) {
	t.Helper()
	rcv := newReceiver(t)
	rcv.on("gone", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) })
	rcv.failAt("flaky", true)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: gone, tenant: acme, url: %q, event_types: [a]}
  - {id: flaky, tenant: acme, url: %q, event_types: [b], retry: {max_attempts: 2}}
  - {id: ops, tenant: acme, url: %q, event_types: ["hookgate.*"], secret: %s}
  - {id: everything, tenant: acme, url: %q}
  - {id: globex-ops, tenant: globex, url: %q, event_types: ["hookgate.*"]}
alerts: {url: %q, secret: %s}
`, rcv.url("gone"), rcv.url("flaky"), rcv.url("ops"), opsSecret, rcv.url("everything"), rcv.url("globex-ops"), rcv.url("alerts"), alertSecret),
		config: func(c *config.Config) {
			c.Admin.Tokens = append(c.Admin.Tokens, config.TokenConfig{Token: globexScopedToken, Tenant: "globex"})
		}})
	return g, rcv
}

// notices decodes the operational events a receiver's path got, in order.
func notices(t *testing.T, rcv *receiver, path string) []outbound.NoticePayload {
	t.Helper()
	var out []outbound.NoticePayload
	for _, r := range rcv.at(path) {
		var p outbound.NoticePayload
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatalf("%s got %s: %v", path, r.body, err)
		}
		out = append(out, p)
	}
	return out
}

func countType(ps []outbound.NoticePayload, typ string) int {
	n := 0
	for _, p := range ps {
		if p.Type == typ {
			n++
		}
	}
	return n
}

// An endpoint answering 410 is disabled, and that is told once, as
// hookgate.endpoint.disabled (with the delivery's hookgate.delivery.failed),
// to the tenant's subscriber, signed with its secret, and to alerts.url,
// signed with its own; never to the endpoint itself, to an endpoint that
// did not ask for operational events, or to another tenant. The events
// are acme's, listed and read through the admin API by acme's and the
// operator's tokens only.
func TestOperationalEventsOfAGoneEndpoint(t *testing.T) {
	t.Parallel()
	g, rcv := noticeGateway(t)
	must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"e1","type":"a"}`), nil))
	testsupport.WaitFor(t, 10*time.Second, "two operational events at ops and alerts", func() bool {
		return len(rcv.at("ops")) >= 2 && len(rcv.at("alerts")) >= 2
	})
	for _, path := range []string{"ops", "alerts"} {
		ps := notices(t, rcv, path)
		if len(ps) != 2 || countType(ps, outbound.NoticeEndpointDisabled) != 1 || countType(ps, outbound.NoticeDeliveryFailed) != 1 {
			t.Fatalf("%s got %+v; want one endpoint.disabled and one delivery.failed", path, ps)
		}
		for _, p := range ps {
			if p.Tenant != "acme" || p.Endpoint != "gone" || p.Reason != outbound.ReasonGone || p.LastStatus != http.StatusGone {
				t.Errorf("%s got %+v; want acme's endpoint gone, reason gone, last status 410", path, p)
			}
		}
	}
	for _, r := range rcv.at("ops") {
		verifySW(t, opsSecret, r.body, r.header)
	}
	for _, r := range rcv.at("alerts") {
		verifySW(t, alertSecret, r.body, r.header)
	}
	ep := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/gone", acmeToken, nil))
	if !ep.Disabled {
		t.Fatalf("gone answered 410 and is not disabled: %+v", ep)
	}

	evs := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?source=hookgate", acmeToken, nil))
	var types []string
	for _, ev := range evs.Data {
		types = append(types, ev.Type)
		if ev.Tenant != "acme" || ev.Source != "hookgate" {
			t.Errorf("operational event %+v; want acme's, of source hookgate", ev)
		}
	}
	slices.Sort(types)
	if !slices.Equal(types, []string{outbound.NoticeDeliveryFailed, outbound.NoticeEndpointDisabled}) {
		t.Fatalf("acme lists operational events %v", types)
	}
	if n := len(must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?source=hookgate", globexScopedToken, nil)).Data); n != 0 {
		t.Errorf("globex lists %d of acme's operational events", n)
	}
	id := evs.Data[0].ID
	wantProblem(t, "globex reads acme's operational event", 404, "-")(g.api("GET", "/events/"+id, globexScopedToken, nil))
	ofAcme := must[admin.Event](t, 200)(g.api("GET", "/events/"+id, acmeToken, nil))
	ofOperator := must[admin.Event](t, 200)(g.api("GET", "/events/"+id, opToken, nil))
	if ofAcme.Deliveries == nil || ofOperator.Deliveries == nil || len(*ofAcme.Deliveries) != 1 || len(*ofOperator.Deliveries) != 2 {
		t.Fatalf("deliveries of an operational event: acme sees %v, the operator %v; want ops's, and ops's and the alert endpoint's", ofAcme.Deliveries, ofOperator.Deliveries)
	}
	if d := (*ofAcme.Deliveries)[0]; d.Endpoint != "ops" {
		t.Errorf("acme sees a delivery to %s", d.Endpoint)
	}

	// Nothing more comes: not to the disabled endpoint, not to the one
	// that takes every type, not to globex.
	must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"e2","type":"b"}`), nil))
	testsupport.WaitFor(t, 10*time.Second, "flaky's delivery.failed at ops", func() bool {
		return countType(notices(t, rcv, "ops"), outbound.NoticeDeliveryFailed) == 2
	})
	if n := rcv.countAt("gone"); n != 1 {
		t.Errorf("the disabled endpoint got %d requests, want the one it answered 410", n)
	}
	for _, p := range notices(t, rcv, "everything") {
		if strings.HasPrefix(p.Type, "hookgate.") {
			t.Errorf("an endpoint that did not ask for operational events got %+v", p)
		}
	}
	if n := rcv.countAt("everything"); n != 2 {
		t.Errorf("everything got %d requests, want the two events", n)
	}
	if n := rcv.countAt("globex-ops"); n != 0 {
		t.Errorf("globex's subscriber got %d of acme's operational events", n)
	}
}

// A delivery that spends its attempts raises one hookgate.delivery.failed;
// the failure of an operational event's own delivery, to the tenant's
// subscriber or to alerts.url, raises none: no loop. (A subscriber failing
// opens its circuit, a change of its state told once to the others; none
// is ever raised about the alert endpoint.)
func TestOperationalEventsDoNotLoop(t *testing.T) {
	t.Parallel()
	for _, failing := range []string{"alerts", "ops"} {
		t.Run(failing+" failing", func(t *testing.T) {
			t.Parallel()
			g, rcv := noticeGateway(t)
			rcv.failAt(failing, true)
			must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"f1","type":"b"}`), nil))
			testsupport.WaitFor(t, 30*time.Second, "every delivery to be final", func() bool {
				live := 0
				for _, st := range []string{"pending", "delivering"} {
					live += len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?status="+st, opToken, nil)).Data)
				}
				failed := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?status=failed", opToken, nil)).Data
				return live == 0 && len(failed) >= 2 // flaky's, and the notice's to the failing one
			})
			ps := notices(t, rcv, "ops")
			if len(ps) == 0 || ps[0].Type != outbound.NoticeDeliveryFailed || ps[0].Reason != outbound.ReasonAttemptsExhausted ||
				ps[0].Endpoint != "flaky" || ps[0].Attempts != 2 || ps[0].LastStatus != http.StatusInternalServerError {
				t.Fatalf("ops got %+v; want flaky's delivery.failed, attempts exhausted after 2, last status 500", ps)
			}
			for _, p := range ps {
				if p != ps[0] {
					t.Fatalf("ops got another operational event: %+v", p)
				}
			}
			evs := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?source=hookgate", opToken, nil)).Data
			var failed, circuit int
			for _, ev := range evs {
				var p outbound.NoticePayload
				if ev.Body == nil || json.Unmarshal([]byte(*ev.Body), &p) != nil {
					t.Fatalf("operational event %+v has no JSON body", ev)
				}
				switch {
				case p.Type == outbound.NoticeDeliveryFailed && p.Endpoint == "flaky":
					failed++
				case p.Type == outbound.NoticeEndpointDisabled && p.Endpoint == "ops" && p.Reason == outbound.ReasonCircuit:
					circuit++
				default:
					t.Errorf("operational event %+v: a notice of a notice's failure", p)
				}
			}
			if failed != 1 || circuit > 1 {
				t.Fatalf("%d delivery.failed about flaky (want 1) and %d circuit openings of ops (want at most 1)", failed, circuit)
			}
		})
	}
}

// An operator's disable and enable through the admin API are told as
// hookgate.endpoint.disabled and .recovered, reason operator.
func TestOperationalEventsOfAnOperatorsChange(t *testing.T) {
	t.Parallel()
	g, rcv := noticeGateway(t)
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/everything", acmeToken, jsonMap{"disabled": true}))
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/everything", acmeToken, jsonMap{"disabled": true})) // no change: no event
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/everything", acmeToken, jsonMap{"disabled": false}))
	testsupport.WaitFor(t, 10*time.Second, "two operational events at ops", func() bool { return len(rcv.at("ops")) >= 2 })
	ps := notices(t, rcv, "ops")
	if len(ps) != 2 || countType(ps, outbound.NoticeEndpointDisabled) != 1 || countType(ps, outbound.NoticeEndpointRecovered) != 1 {
		t.Fatalf("ops got %+v; want one disabled and one recovered", ps)
	}
	for _, p := range ps {
		if p.Endpoint != "everything" || p.Reason != outbound.ReasonOperator {
			t.Errorf("got %+v; want everything's, reason operator", p)
		}
	}
	if n := rcv.countAt("everything"); n != 0 {
		t.Errorf("the endpoint got %d operational events about itself", n)
	}
}

// A circuit opened by failures is told once (endpoint.disabled, reason
// circuit); an operator's retry that closes it is the recovery
// (endpoint.recovered, reason operator), told once too.
func TestOperationalEventsOfACircuitAnOperatorCloses(t *testing.T) {
	t.Parallel()
	g, rcv := noticeGateway(t)
	for i := range 3 { // two attempts each: the fifth failure in a row opens the circuit
		must[jsonMap](t, 202)(g.post("open", fmt.Appendf(nil, `{"id":"c%d","type":"b"}`, i), nil))
	}
	testsupport.WaitFor(t, 20*time.Second, "flaky's circuit opening at ops", func() bool {
		return countType(notices(t, rcv, "ops"), outbound.NoticeEndpointDisabled) == 1
	})
	var failed []admin.Delivery
	testsupport.WaitFor(t, 10*time.Second, "a failed delivery of flaky", func() bool {
		failed = must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=flaky&status=failed", acmeToken, nil)).Data
		return len(failed) > 0
	})
	rcv.failAt("flaky", false)
	must[jsonMap](t, 202)(g.api("POST", "/deliveries/"+failed[0].ID+"/retry", acmeToken, nil))
	testsupport.WaitFor(t, 10*time.Second, "flaky's recovery at ops", func() bool {
		return countType(notices(t, rcv, "ops"), outbound.NoticeEndpointRecovered) == 1
	})
	for _, p := range notices(t, rcv, "ops") {
		switch {
		case p.Type == outbound.NoticeDeliveryFailed:
		case p.Type == outbound.NoticeEndpointDisabled && p.Endpoint == "flaky" && p.Reason == outbound.ReasonCircuit && p.Until != "":
		case p.Type == outbound.NoticeEndpointRecovered && p.Endpoint == "flaky" && p.Reason == outbound.ReasonOperator:
		default:
			t.Errorf("ops got %+v", p)
		}
	}
	if n := countType(notices(t, rcv, "ops"), outbound.NoticeEndpointDisabled); n != 1 {
		t.Errorf("%d endpoint.disabled, want 1", n)
	}
}
