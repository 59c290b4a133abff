package main

import (
	"math/rand/v2"
	"strconv"
)

// eventBody builds a webhook body shaped like a provider's invoice event
// (ids, amounts, timestamps, nested objects, an array of line items) and
// about size bytes long. Identifiers and figures are random, so the body
// compresses like a real payload does, not like padding. It carries the
// event id and the send time ("sent", Unix nanoseconds) that the receiver
// reads back for ingest-to-delivery latency.
func eventBody(id string, sentNanos int64, size int) []byte {
	r := rand.New(rand.NewPCG(uint64(sentNanos), uint64(len(id))))
	created := sentNanos / 1e9
	b := make([]byte, 0, size+256)
	b = append(b, `{"id":`...)
	b = strconv.AppendQuote(b, id)
	b = append(b, `,"type":"bench.event","sent":`...)
	b = strconv.AppendInt(b, sentNanos, 10)
	b = append(b, `,"object":"event","api_version":"2024-06-20","created":`...)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"livemode":false,"pending_webhooks":1,"request":{"id":"req_`...)
	b = randToken(b, r, 14)
	b = append(b, `","idempotency_key":"`...)
	b = randToken(b, r, 32)
	b = append(b, `"},"data":{"object":{"id":"in_`...)
	b = randToken(b, r, 24)
	due := 100 + r.IntN(100000)
	b = append(b, `","object":"invoice","account_country":"US","amount_due":`...)
	b = strconv.AppendInt(b, int64(due), 10)
	b = append(b, `,"amount_paid":`...)
	b = strconv.AppendInt(b, int64(due), 10)
	b = append(b, `,"currency":"usd","customer":"cus_`...)
	b = randToken(b, r, 14)
	b = append(b, `","customer_email":"`...)
	b = randToken(b, r, 10)
	b = append(b, `@example.com","status":"paid","lines":{"object":"list","data":[`...)
	for i := 0; len(b) < size-200; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		amount := 100 + r.IntN(50000)
		b = append(b, `{"id":"il_`...)
		b = randToken(b, r, 24)
		b = append(b, `","object":"line_item","amount":`...)
		b = strconv.AppendInt(b, int64(amount), 10)
		b = append(b, `,"quantity":`...)
		b = strconv.AppendInt(b, int64(1+r.IntN(9)), 10)
		b = append(b, `,"period":{"start":`...)
		b = strconv.AppendInt(b, created-int64(r.IntN(2592000)), 10)
		b = append(b, `,"end":`...)
		b = strconv.AppendInt(b, created+int64(r.IntN(2592000)), 10)
		b = append(b, `},"price":{"id":"price_`...)
		b = randToken(b, r, 24)
		b = append(b, `","unit_amount":`...)
		b = strconv.AppendInt(b, int64(amount), 10)
		b = append(b, `}}`...)
	}
	b = append(b, `],"has_more":false},"memo":"`...)
	b = randToken(b, r, size-len(b)-5)
	return append(b, `"}}}`...)
}

const tokenChars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// randToken appends n random alphanumerics (none if n <= 0).
func randToken(b []byte, r *rand.Rand, n int) []byte {
	for range n {
		b = append(b, tokenChars[r.IntN(len(tokenChars))])
	}
	return b
}
