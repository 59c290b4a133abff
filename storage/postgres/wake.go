package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// New deliveries are announced to the other gateways with NOTIFY on a
// channel of the store's schema, so that their dispatchers claim at once
// instead of at their next poll. A NOTIFY inside the accept transaction
// would take the database's notification lock at every ingest's commit;
// instead a goroutine of the store sends what was announced since its last
// NOTIFY, at most one every announceEvery, in a statement of its own. An
// announcement is a hint: one lost (a listener's connection dropped) costs
// a poll interval, never a delivery.

// announceEvery is the shortest time between two NOTIFYs of one gateway.
const announceEvery = 5 * time.Millisecond

// maxPayload keeps a NOTIFY's payload under the server's 8000 bytes.
const maxPayload = 7000

// waker sends a store's announcements. Its goroutine starts with the
// first announcement.
type waker struct {
	once    sync.Once
	mu      sync.Mutex
	pending map[string]struct{}
	started bool
	signal  chan struct{} // capacity 1: something is pending
	stop    chan struct{} // closed by Close
	done    chan struct{} // closed when the sender ended
}

func newWaker() *waker {
	return &waker{pending: map[string]struct{}{}, signal: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// wakeChannel names the schema's notification channel: NOTIFY is
// database-wide, and gateways on another schema of the database are
// another cluster.
func wakeChannel(schema string) string {
	sum := sha256.Sum256([]byte(schema))
	return "hookgate_wake_" + hex.EncodeToString(sum[:8])
}

// newSelf names this store handle in its announcements, so that its own
// listener skips them.
func newSelf() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Announce tells the other gateways on the database, within a few
// milliseconds, that the endpoints have new deliveries due. It never
// blocks.
func (db *DB) Announce(endpoints ...string) {
	if len(endpoints) == 0 || db.closed.Load() {
		return
	}
	w := db.wake
	w.once.Do(func() {
		w.mu.Lock()
		w.started = true
		w.mu.Unlock()
		go db.sendAnnouncements()
	})
	w.mu.Lock()
	for _, id := range endpoints {
		w.pending[id] = struct{}{}
	}
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// sendAnnouncements sends what is pending, at most one NOTIFY per
// announceEvery, until the store is closed.
func (db *DB) sendAnnouncements() {
	w := db.wake
	defer close(w.done)
	pace := time.NewTimer(0)
	defer pace.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.signal:
		}
		w.mu.Lock()
		ids := make([]string, 0, len(w.pending))
		for id := range w.pending {
			ids = append(ids, id)
		}
		clear(w.pending)
		w.mu.Unlock()
		slices.Sort(ids)
		for _, payload := range db.payloads(ids) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := db.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, db.channel, payload)
			cancel()
			if err != nil && !db.closed.Load() {
				db.log.Debug("announce new deliveries (the other gateways poll)", "err", db.redact(err))
			}
		}
		pace.Reset(announceEvery)
		select {
		case <-w.stop:
			return
		case <-pace.C:
		}
	}
}

// payloads packs ids into NOTIFY payloads: this handle's name, a space,
// the ids joined by commas. (An id with a comma would wake loops of no
// endpoint: a hint lost, never a delivery.)
func (db *DB) payloads(ids []string) []string {
	var out []string
	var b strings.Builder
	for _, id := range ids {
		if b.Len() > 0 && b.Len()+1+len(id) > maxPayload {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteString(db.self)
			b.WriteByte(' ')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(id)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// stopAnnouncing ends the sender, if it started, and waits for it.
func (db *DB) stopAnnouncing() {
	w := db.wake
	close(w.stop)
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if started {
		<-w.done
	}
}

// Listen calls fn with the endpoints the other gateways announce, on a
// connection of its own (outside the pool), until ctx ends or the
// connection fails; it returns why. The caller listens again, and polls
// meanwhile.
func (db *DB) Listen(ctx context.Context, fn func(endpoints []string)) error {
	if err := db.check(); err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, db.pool.Config().ConnConfig)
	if err != nil {
		return db.fail("listen", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{db.channel}.Sanitize()); err != nil {
		return db.fail("listen", err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return db.fail("listen", err)
		}
		from, ids, ok := strings.Cut(n.Payload, " ")
		if !ok || from == db.self || ids == "" {
			continue
		}
		fn(strings.Split(ids, ","))
	}
}
