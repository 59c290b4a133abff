package outbound

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"hookgate/storage"
)

// Headers of every delivery request (SPEC §4).
const (
	HeaderIdempotencyKey   = "Idempotency-Key"
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
	HeaderEventType        = "hookgate-event-type"
	HeaderSource           = "hookgate-source"
	HeaderAttempt          = "hookgate-attempt"
)

// Response handling bounds.
const (
	// responseExcerpt is how much of a response body an attempt records.
	responseExcerpt = 1 << 10
	// drainLimit is how much more of a body is read and thrown away so the
	// connection can be reused; a bigger body closes the connection.
	drainLimit = 64 << 10
)

// errAttemptTimeout is the cause of an attempt's context when the
// endpoint's timeout, not a shutdown, ended it.
var errAttemptTimeout = errors.New("attempt timed out")

// sender makes one HTTP attempt of a delivery.
type sender struct {
	client    *http.Client
	userAgent string
	timeout   time.Duration // when the endpoint sets none
	now       func() time.Time
}

// attemptResult is what one attempt did: its answer for Decide and its
// record for the store.
type attemptResult struct {
	answer  Answer
	attempt storage.Attempt
	// unsent: still said no, and nothing was sent.
	unsent bool
}

// send POSTs the job's event to the endpoint as attempt number
// AttemptCount+1, within the endpoint's timeout. It never returns an error:
// every failure is an answer to decide on. still, when set, is asked once
// the attempt's time is taken whether ep is still the endpoint to send to:
// a change answered before that time must apply to the attempt.
func (s *sender) send(ctx context.Context, ep *storage.Endpoint, job *storage.Job, still func() bool) attemptResult {
	// Never longer than its lease can be (an endpoint stored by an earlier
	// build may have a longer timeout): a second attempt would start while
	// the first still ran.
	timeout := min(cmp.Or(ep.Timeout, s.timeout), storage.MaxAttemptTimeout)
	start := time.Now() // before the deadline starts: a timeout's latency is never below it
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, errAttemptTimeout)
	defer cancel()
	n := job.Delivery.AttemptCount + 1
	at := s.now()
	res := attemptResult{attempt: storage.Attempt{N: n, At: at}}
	if still != nil && !still() {
		res.unsent = true
		return res
	}
	req, err := newRequest(ctx, ep, job, n, at, s.userAgent)
	if err != nil {
		res.answer.Err = err
		res.attempt.Error = err.Error()
		return res
	}
	resp, err := s.client.Do(req)
	if err != nil {
		res.answer.Err = err
		res.attempt.Error = describe(ctx, err, timeout)
		res.attempt.Latency = time.Since(start)
		return res
	}
	// Once the attempt ends, its body is closed: a 101 answer (never asked
	// for) hands over the raw connection, which the request's context no
	// longer reaches, and a receiver that then sent nothing held the
	// attempt, its slot and the shutdown for good. Such an answer is not
	// read at all.
	stop := context.AfterFunc(ctx, func() { _ = resp.Body.Close() })
	var excerpt string
	var readErr error
	if resp.StatusCode == http.StatusSwitchingProtocols {
		_ = resp.Body.Close()
	} else {
		excerpt, readErr = readExcerpt(resp.Body)
	}
	stop()
	res.attempt.Latency = time.Since(start)
	res.answer = Answer{StatusCode: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	res.attempt.StatusCode = resp.StatusCode
	res.attempt.Response = excerpt
	res.attempt.Error = statusError(ctx, resp, readErr, timeout)
	return res
}

// newRequest builds the delivery request: the event's body and
// Content-Type, the endpoint's static headers, then the gateway's headers,
// which a static header cannot override.
func newRequest(ctx context.Context, ep *storage.Endpoint, job *storage.Job, n int, at time.Time, userAgent string) (*http.Request, error) {
	ev := &job.Event
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(ev.Body))
	if err != nil {
		return nil, fmt.Errorf("invalid endpoint url: %w", withoutURL(err))
	}
	// net/http dials (and checks the certificate of) the host IDNA's
	// lookup profile maps an internationalized name to, but writes the
	// Host header without that mapping: a receiver routing by Host
	// answered 404 or 421 to every delivery.
	if host := req.URL.Hostname(); ASCIIHost(host) != host {
		req.Host = ASCIIHost(host)
		if port := req.URL.Port(); port != "" {
			req.Host = net.JoinHostPort(req.Host, port)
		}
	}
	h := req.Header
	for k, v := range ep.Headers {
		h.Set(k, v)
	}
	if ev.ContentType != "" {
		h.Set("Content-Type", headerValue(ev.ContentType))
	}
	key := job.Delivery.IdempotencyKey
	h.Set(HeaderIdempotencyKey, key)
	h.Set(HeaderWebhookID, key)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(at.Unix(), 10))
	if sig := Sign(key, at, ev.Body, ep.Secrets, at); sig != "" {
		h.Set(HeaderWebhookSignature, sig)
	} else {
		h.Del(HeaderWebhookSignature)
	}
	h.Set(HeaderEventType, headerValue(ev.Type))
	h.Set(HeaderSource, ev.Source)
	h.Set(HeaderAttempt, strconv.Itoa(n))
	h.Set("User-Agent", userAgent)
	return req, nil
}

// headerValue makes provider data (an event's type, its Content-Type) fit
// for a header: net/http refuses to send a value with a control character
// other than tab, so an event whose JSON type held "\n" could never be
// delivered. Such bytes, and then '%' too, are percent-encoded (%0A); any
// other value is sent as it is. The body still has the original.
func headerValue(v string) string {
	bad := func(c byte) bool { return c < ' ' && c != '\t' || c == 0x7f }
	if !strings.ContainsFunc(v, func(r rune) bool { return r < 0x80 && bad(byte(r)) }) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if c := v[i]; bad(c) || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// readExcerpt returns the first KiB of a body as valid UTF-8, drains a
// little more so the connection can be reused, and closes it. A character
// cut by the limit is left out, not replaced.
func readExcerpt(body io.ReadCloser) (string, error) {
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, responseExcerpt))
	if err == nil {
		_, err = io.CopyN(io.Discard, body, drainLimit)
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}
	if len(b) == responseExcerpt {
		b = trimCutRune(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), err
}

// trimCutRune drops the start of a UTF-8 character at the end of b, if
// the character does not end there.
func trimCutRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// statusError is the error text of an attempt that got a response: empty
// for 2xx, "HTTP <code>" otherwise (a 3xx says it was not followed).
// Failing to read the body after a 2xx does not fail the attempt: the
// endpoint has answered.
func statusError(ctx context.Context, resp *http.Response, readErr error, timeout time.Duration) string {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return ""
	}
	msg := "HTTP " + strconv.Itoa(code)
	if code >= 300 && code < 400 {
		msg += " (redirects are not followed)"
	}
	if readErr != nil {
		msg += "; reading body: " + describe(ctx, readErr, timeout)
	}
	return msg
}

// describe is the error text of a transport error. It drops the URL that
// *url.Error adds (a query string may carry a credential) and names a
// timeout as such.
func describe(ctx context.Context, err error, timeout time.Duration) string {
	if errors.Is(context.Cause(ctx), errAttemptTimeout) {
		return fmt.Sprintf("timeout after %s", timeout)
	}
	return withoutURL(err).Error()
}

// withoutURL unwraps a *url.Error, whose text repeats the URL.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}
