package ctrltest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/apireq"
)

// A request as the perturbing transport sees it: what it does to which
// object, read from the URL (and for a create, from the response).
type request struct {
	verb      string // get, list, watch, create, update, patch, delete, deletecollection
	group     string
	version   string
	resource  string
	namespace string
	name      string
	sub       string // subresource, such as status
}

// parseRequest reads the resource and verb of an API request from its method
// and URL. ok is false for paths that are not a resource (discovery,
// /version).
func parseRequest(r *http.Request) (request, bool) {
	i, ok := apireq.Parse(r)
	return request{verb: i.Verb, group: i.Group, version: i.Version, resource: i.Resource,
		namespace: i.Namespace, name: i.Name, sub: i.Subresource}, ok
}

// write reports whether q changes state a controller owns: not an Event, a
// Lease or an access review.
func (q request) write() bool {
	switch q.verb {
	case "create", "update", "patch", "delete", "deletecollection":
	default:
		return false
	}
	switch {
	case q.resource == "events", q.resource == "leases", strings.HasSuffix(q.resource, "reviews"):
		return false
	}
	return true
}

// what names the object and the part of it a request writes, the same in
// every run: "patch widgets/greeting/status".
func (q request) what() string {
	s := q.verb + " " + q.resource
	if q.name != "" {
		s += "/" + q.name
	}
	if q.sub != "" {
		s += "/" + q.sub
	}
	return s
}

// jsonOnly asks for JSON where the header asks for protobuf first, so that
// the transport can read the responses and the watch streams.
func jsonOnly(accept string) string {
	if !strings.Contains(accept, "protobuf") {
		return accept
	}
	var keep []string
	for _, t := range strings.Split(accept, ",") {
		if !strings.Contains(t, "protobuf") {
			keep = append(keep, strings.TrimSpace(t))
		}
	}
	if len(keep) == 0 {
		return "application/json"
	}
	return strings.Join(keep, ",")
}

// errCrashed is every request's answer once the manager that sends it has
// crashed: nothing it sends after the crash reaches the server.
var errCrashed = errors.New("ctrltest: this manager crashed (a plan stopped it)")

// perturber sits between one run's managers and the API server: it records
// what they write and watch, and applies the run's plan.
type perturber struct {
	plan  plan
	trace *trace
	stuck *stuck

	mu        sync.Mutex
	writes    map[string]int // occurrences of each write, by what()
	order     []string       // the managers' writes in order, as points ("patch-widgets-a-1")
	watched   map[string]bool
	events    []eventRecord
	step      int
	held      map[string]chan struct{} // resources whose watch events are held, closed on release
	stashes   map[*stream]bool         // streams that may hold back an event
	gone      map[string]bool          // resources whose next watch answers 410 Gone
	streams   map[*stream]bool
	pending   []pendingWrite     // the workload's, not yet seen by every watch that should
	namespace string             // the run's
	objects   []objectKey        // that the managers wrote
	crash     chan struct{}      // closed when the plan crashes the manager
	life      *life              // the latest manager's
	lists     map[string]request // how the managers list each resource
	travel    *snapshot          // what a time-travel plan answers lists of its resource with
	catchup   string             // the resource a time traveler's managers list again once released
}

type eventRecord struct {
	resource, name string
	n              int // this event is the name's n-th in its stream, from 1
	step           int
}

func newPerturber(p plan, tr *trace, st *stuck, namespace string) *perturber {
	return &perturber{plan: p, namespace: namespace, trace: tr, stuck: st, writes: map[string]int{}, watched: map[string]bool{},
		held: map[string]chan struct{}{}, gone: map[string]bool{}, lists: map[string]request{}, streams: map[*stream]bool{}, stashes: map[*stream]bool{}, crash: make(chan struct{})}
}

// life is one manager's: dead once the plan crashed it.
type life struct {
	mu   sync.Mutex
	dead bool
}

func (l *life) isDead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// wrap is rest.Config.WrapTransport for a manager of the run.
func (p *perturber) wrap(l *life) func(http.RoundTripper) http.RoundTripper {
	p.mu.Lock()
	p.life = l
	p.mu.Unlock()
	return func(rt http.RoundTripper) http.RoundTripper { return &perturbing{p: p, life: l, next: rt} }
}

// wrapWorkload is rest.Config.WrapTransport for the workload: its writes
// are recorded, not perturbed.
func (p *perturber) wrapWorkload(rt http.RoundTripper) http.RoundTripper {
	return &perturbing{p: p, life: &life{}, next: rt, workload: true}
}

// count is the key under which a write is counted: the workload's apart
// from the managers', so that one does not shift the other's numbers.
func (t *perturbing) count(what string) string {
	if t.workload {
		return "workload " + what
	}
	return what
}

type perturbing struct {
	p        *perturber
	life     *life
	next     http.RoundTripper
	workload bool
}

func (t *perturbing) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.life.isDead() {
		return nil, errCrashed
	}
	q, ok := parseRequest(r)
	if !ok || (t.workload && !q.write()) {
		return t.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Accept", jsonOnly(r.Header.Get("Accept")))
	p := t.p
	switch {
	case q.verb == "watch":
		return p.watch(t, r, q)
	case q.verb == "list":
		p.mu.Lock()
		p.lists[q.resource] = q
		p.mu.Unlock()
		if s := p.traveling(q.resource); s != nil {
			p.trace.add("list %s: answered as of resourceVersion %s", q.resource, s.rv)
			return s.list(r), nil
		}
		if err := p.waitRelease(r, q.resource); err != nil {
			return nil, err
		}
		return t.next.RoundTrip(r)
	case q.write():
		return p.write(t, r, q)
	}
	return t.next.RoundTrip(r)
}

// write sends a write, counts it, and applies a plan that acts on it.
func (p *perturber) write(t *perturbing, r *http.Request, q request) (*http.Response, error) {
	what := q.what()
	p.mu.Lock()
	n := p.writes[t.count(what)] + 1
	if q.verb != "create" {
		p.writes[t.count(what)] = n
	}
	at := p.plan.point == point(what, n) && q.verb != "create" && !t.workload
	p.mu.Unlock()
	if at && p.plan.kind == kindConflict {
		p.inject("answered %s #%d with 409 Conflict, not sent", what, n)
		return answer(r, http.StatusConflict, conflictStatus(q)), nil
	}
	if at && p.plan.kind == kindThrottled {
		p.mu.Lock()
		p.plan.point = "" // once: client-go sends it again
		p.mu.Unlock()
		p.inject("answered %s #%d with 429 Too Many Requests, not sent", what, n)
		return answer(r, http.StatusTooManyRequests, throttledStatus, "Retry-After", "1"), nil
	}
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	// The answer names a created object and tells the object's
	// resourceVersion, which the managers must see before settling.
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var o struct {
		Metadata struct {
			Name            string            `json:"name"`
			Labels          map[string]string `json:"labels"`
			ResourceVersion string            `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if rerr == nil && json.Unmarshal(body, &o) == nil && q.verb == "create" && o.Metadata.Name != "" {
		q.name = o.Metadata.Name
		what = q.what()
		p.mu.Lock()
		n = p.writes[t.count(what)] + 1
		p.writes[t.count(what)] = n
		at = p.plan.point == point(what, n) && !t.workload
		p.mu.Unlock()
	}
	if rv, err := strconv.ParseInt(o.Metadata.ResourceVersion, 10, 64); err == nil && t.workload && resp.StatusCode < 300 {
		p.mu.Lock()
		p.pending = append(p.pending, pendingWrite{resource: q.resource, name: q.name, labels: o.Metadata.Labels, rv: rv})
		p.mu.Unlock()
	}
	if resp.StatusCode < 300 {
		p.stuck.changed()
	}
	p.mu.Lock()
	if !t.workload {
		p.order = append(p.order, point(what, n))
	}
	if q.name != "" && (q.namespace == "" || q.namespace == p.namespace) && resp.StatusCode < 300 {
		k := objectKey{gvr: schema.GroupVersionResource{Group: q.group, Version: q.version, Resource: q.resource}, name: q.name, namespaced: q.namespace != ""}
		if !slices.Contains(p.objects, k) {
			p.objects = append(p.objects, k)
		}
	}
	p.mu.Unlock()
	if resp.StatusCode == http.StatusConflict && !t.workload {
		// The manager wrote from the state a held-back event replaced:
		// a watch delivers the newer state soon after, and so does this.
		p.flushObject(q.resource, q.name)
	}
	who := "manager"
	if t.workload {
		who = "workload"
	}
	p.trace.add("%s: %s #%d: %d", who, what, n, resp.StatusCode)
	if at && p.plan.kind == kindCrash && resp.StatusCode < 300 {
		t.life.mu.Lock()
		t.life.dead = true
		t.life.mu.Unlock()
		p.inject("crashed the manager after %s #%d", what, n)
		close(p.crash)
	}
	return resp, nil
}

// A Status the plan answers with, as the API server words it.
var (
	goneStatus      = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version (ctrltest)","reason":"Expired","code":410}`
	throttledStatus = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too many requests, please try again later (ctrltest)","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}`
)

func conflictStatus(q request) string {
	return fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on %s %q: the object has been modified; please apply your changes to the latest version and try again (ctrltest)","reason":"Conflict","details":{"name":%q,"kind":%q},"code":409}`,
		q.resource, q.name, q.name, q.resource)
}

// answer is the response the plan gives r in the server's place.
func answer(r *http.Request, code int, status string, header ...string) *http.Response {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	return &http.Response{StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(status)), ContentLength: int64(len(status)), Request: r}
}

// inject marks the point where the plan acted, in the trace and for the
// finding.
func (p *perturber) inject(format string, args ...any) {
	p.trace.mark(fmt.Sprintf(format, args...))
}

// waitRelease blocks while the resource's events are held.
func (p *perturber) waitRelease(r *http.Request, resource string) error {
	p.mu.Lock()
	ch := p.held[resource]
	p.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-r.Context().Done():
		return r.Context().Err()
	}
}

func (p *perturber) watch(t *perturbing, r *http.Request, q request) (*http.Response, error) {
	p.mu.Lock()
	p.watched[q.resource] = true
	p.lists[q.resource] = q
	isGone := p.gone[q.resource] && r.URL.Query().Get("resourceVersion") != ""
	delete(p.gone, q.resource)
	p.mu.Unlock()
	if isGone {
		p.trace.add("watch %s: 410 Gone", q.resource)
		return answer(r, http.StatusGone, goneStatus), nil
	}
	var initial []frame
	tv := p.traveling(q.resource)
	switch {
	case tv != nil && r.URL.Query().Get("sendInitialEvents") == "true":
		// Its events are held (deliver) until the managers catch up.
		initial = tv.initial(r)
		r = tv.resume(r)
		p.trace.add("watch %s: %d initial events as of resourceVersion %s", q.resource, len(initial)-1, tv.rv)
	case tv == nil:
		if err := p.waitRelease(r, q.resource); err != nil {
			return nil, err
		}
	}
	resp, err := t.next.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return resp, err
	}
	s := &stream{p: p, life: t.life, resource: q.resource, body: resp.Body, seen: map[string]int{}, done: make(chan struct{}), initial: initial}
	query := r.URL.Query()
	if sel, err := labels.Parse(query.Get("labelSelector")); err == nil && !sel.Empty() {
		s.labels = sel
	}
	if sel, err := fields.ParseSelector(query.Get("fieldSelector")); err == nil && !sel.Empty() {
		s.fields = sel
	}
	s.listing = query.Get("sendInitialEvents") == "true" || initial != nil
	if rv, err := strconv.ParseInt(query.Get("resourceVersion"), 10, 64); err == nil && !s.listing {
		s.observed.Store(rv) // the list before the watch is in the cache
		s.received.Store(rv)
	}
	p.mu.Lock()
	s.fresh = p.catchup == q.resource
	p.mu.Unlock()
	s.synced.Store(!s.listing) // a watch after a list: the list is in
	pr, pw := io.Pipe()
	s.out = pw
	resp.Body = &streamBody{PipeReader: pr, s: s}
	p.mu.Lock()
	p.streams[s] = true
	p.mu.Unlock()
	go s.run()
	return resp, nil
}

// stream passes one watch's events on to the manager, as the plan says.
type stream struct {
	p        *perturber
	life     *life
	resource string
	body     io.ReadCloser
	out      *io.PipeWriter
	seen     map[string]int // events per object name
	done     chan struct{}
	once     sync.Once

	labels labels.Selector // of the watch request, nil for all
	fields fields.Selector // of the watch request, nil for all

	wmu      sync.Mutex   // held from deciding on a frame to writing it
	stash    *frame       // an event kept from the manager until the object's next one
	observed atomic.Int64 // resourceVersion up to which the manager has processed the stream
	received atomic.Int64 // resourceVersion up to which the stream was read from the server
	listing  bool         // before the end of the initial events of a watch that sends them
	initial  []frame      // a time-travel plan's, sent before the server's

	// fresh: begun once a time traveler's view was released, from the
	// server's state; synced once its manager has taken that state in.
	fresh  bool
	synced atomic.Bool
}

type frame struct {
	raw     json.RawMessage
	typ     string
	name    string
	rv      string
	kind    string
	version string // apiVersion
	listed  bool   // the bookmark that ends a watch's initial events
}

// matches reports whether the watch sends events of an object with these
// name and labels, as far as its selectors say.
func (s *stream) matches(name string, lbls map[string]string) bool {
	if s.labels != nil && !s.labels.Matches(labels.Set(lbls)) {
		return false
	}
	return s.fields == nil || s.fields.Matches(fields.Set{"metadata.name": name, "metadata.namespace": s.p.namespace})
}

// write passes a frame to the manager; once it has read the frame, a
// bookmark at the frame's resourceVersion follows, and once the manager has
// read that (it reads a watch's frames one after the other, each processed
// before the next is read) the frame counts as observed.
func (s *stream) write(f frame) error {
	if _, err := s.out.Write(append(f.raw, '\n')); err != nil {
		return err
	}
	if f.typ == "ADDED" || f.typ == "MODIFIED" || f.typ == "DELETED" {
		s.p.stuck.changed()
	}
	if s.listing {
		// The initial events of a watch are one list: the manager takes
		// them in at its end.
		if !f.listed {
			return nil
		}
		s.listing = false
	}
	rv, err := strconv.ParseInt(f.rv, 10, 64)
	if err != nil || f.kind == "" {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"type": "BOOKMARK", "object": map[string]any{
		"kind": f.kind, "apiVersion": f.version, "metadata": map[string]any{"resourceVersion": f.rv}}})
	if _, err := s.out.Write(append(b, '\n')); err != nil {
		return err
	}
	s.synced.Store(true) // read after the list it ends was taken in
	if rv > s.observed.Load() {
		s.observed.Store(rv)
	}
	return nil
}

type streamBody struct {
	*io.PipeReader
	s *stream
}

func (b *streamBody) Close() error {
	b.s.stop()
	return b.PipeReader.Close()
}

func (s *stream) stop() {
	s.once.Do(func() {
		close(s.done)
		s.body.Close()
		s.p.mu.Lock()
		delete(s.p.streams, s)
		s.p.mu.Unlock()
	})
}

func (s *stream) run() {
	defer s.stop()
	for _, f := range s.initial {
		s.wmu.Lock()
		err := s.write(f)
		s.wmu.Unlock()
		if err != nil {
			s.out.CloseWithError(err)
			return
		}
	}
	dec := json.NewDecoder(s.body)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			s.flush()
			s.out.CloseWithError(err)
			return
		}
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Kind       string `json:"kind"`
				APIVersion string `json:"apiVersion"`
				Metadata   struct {
					Name            string            `json:"name"`
					ResourceVersion string            `json:"resourceVersion"`
					Annotations     map[string]string `json:"annotations"`
				} `json:"metadata"`
			} `json:"object"`
		}
		_ = json.Unmarshal(raw, &ev)
		o := ev.Object
		if rv, err := strconv.ParseInt(o.Metadata.ResourceVersion, 10, 64); err == nil && rv > s.received.Load() {
			s.received.Store(rv)
		}
		f := frame{raw: raw, typ: ev.Type, name: o.Metadata.Name, rv: o.Metadata.ResourceVersion, kind: o.Kind, version: o.APIVersion,
			listed: ev.Type == "BOOKMARK" && o.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true"}
		if err := s.deliver(f); err != nil {
			s.out.CloseWithError(err)
			return
		}
	}
}

// deliver passes one frame on, after any hold on its resource, unless the
// plan stashes it or it replaces the stashed one.
func (s *stream) deliver(f frame) error {
	p := s.p
	for {
		p.mu.Lock()
		ch := p.held[s.resource]
		p.mu.Unlock()
		if ch == nil {
			break
		}
		select {
		case <-ch:
		case <-s.done:
			return io.ErrClosedPipe
		}
	}
	if s.life.isDead() {
		return errCrashed
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if f.name == "" || (f.typ != "ADDED" && f.typ != "MODIFIED" && f.typ != "DELETED") {
		return s.write(f)
	}
	s.seen[f.name]++
	n := s.seen[f.name]
	p.mu.Lock()
	p.events = append(p.events, eventRecord{resource: s.resource, name: f.name, n: n, step: p.step})
	stashNow := p.plan.kind == kindUnobserved && p.plan.point == point(s.resource+" "+f.name, n)
	if stashNow {
		p.stashes[s] = true
	}
	p.mu.Unlock()
	p.trace.add("watch %s: %s %s (#%d)", s.resource, f.typ, f.name, n)
	if st := s.stash; st != nil && st.name == f.name {
		// Coalesced: the manager never sees the stashed event.
		s.stash = nil
		p.inject("the manager never saw %s %s/%s: the next event replaced it", st.typ, s.resource, f.name)
	}
	if stashNow {
		s.stash = &f
		p.trace.add("holding %s/%s #%d back until it changes again", s.resource, f.name, n)
		return nil
	}
	return s.write(f)
}

// flush delivers the stream's stashed event, if any: nothing is lost.
func (s *stream) flush() bool {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	st := s.stash
	if st == nil {
		return false
	}
	s.stash = nil
	s.p.trace.add("delivered %s/%s late: no later event replaced it", s.resource, st.name)
	s.write(*st)
	return true
}

// streamsOf returns the streams of set that watch resource. Under p.mu.
func streamsOf(set map[*stream]bool, resource string) []*stream {
	var ss []*stream
	for s := range set {
		if s.resource == resource {
			ss = append(ss, s)
		}
	}
	return ss
}

// flushObject delivers the stashed event of an object, if any.
func (p *perturber) flushObject(resource, name string) {
	p.mu.Lock()
	ss := streamsOf(p.stashes, resource)
	p.mu.Unlock()
	for _, s := range ss {
		s.wmu.Lock()
		match := s.stash != nil && s.stash.name == name
		s.wmu.Unlock()
		if match {
			s.flush()
		}
	}
}

// endStep delivers every stashed event: the workload is settling, and an
// event with no successor must not be lost.
func (p *perturber) endStep() (flushed bool) {
	p.mu.Lock()
	var ss []*stream
	for s := range p.stashes {
		ss = append(ss, s)
	}
	clear(p.stashes)
	p.mu.Unlock()
	for _, s := range ss {
		flushed = s.flush() || flushed
	}
	return flushed
}

// hold keeps the resource's watch events (and lists) from the managers
// until release.
func (p *perturber) hold(resource string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[resource] == nil {
		p.held[resource] = make(chan struct{})
	}
}

func (p *perturber) release() {
	p.stuck.changed() // what was held may end a failure
	p.mu.Lock()
	defer p.mu.Unlock()
	for r, ch := range p.held {
		close(ch)
		delete(p.held, r)
	}
}

func (p *perturber) holding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held) > 0
}

// expire ends the resource's watches with 410 Gone, and answers its next
// watch that resumes from a resourceVersion with 410 too.
func (p *perturber) expire(resource string) {
	p.mu.Lock()
	p.gone[resource] = true
	ss := streamsOf(p.streams, resource)
	p.mu.Unlock()
	for _, s := range ss {
		s.wmu.Lock()
		s.out.Write([]byte(`{"type":"ERROR","object":` + goneStatus + "}\n"))
		s.wmu.Unlock()
		s.stop()
	}
	p.trace.add("watch %s: 410 Gone", resource)
}

// crashNow crashes the latest manager, as a crash plan does after a write.
func (p *perturber) crashNow() {
	p.mu.Lock()
	l := p.life
	p.mu.Unlock()
	l.mu.Lock()
	l.dead = true
	l.mu.Unlock()
	close(p.crash)
}

func (p *perturber) crashed() bool {
	select {
	case <-p.crash:
		return true
	default:
		return false
	}
}

func (p *perturber) objectKeys() []objectKey { return p.objects }

// pendingWrite is a write of the workload that the managers' watches of its
// resource must deliver before the managers can be idle.
type pendingWrite struct {
	resource, name string
	labels         map[string]string
	rv             int64
}

// waitWrites waits until every live watch of the managers has received
// from the server (or, if delivered, delivered to its manager) the
// workload's writes that it should see, except on held resources.
func (p *perturber) waitWrites(ctx context.Context, delivered bool) error {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		p.mu.Lock()
		var missing []string
		var keep []pendingWrite
		for _, w := range p.pending {
			if p.held[w.resource] != nil {
				keep = append(keep, w)
				continue
			}
			// A watched resource with no live watch is being listed
			// again (or its manager restarts): wait for the new watch.
			waiting := p.watched[w.resource]
			for s := range p.streams {
				if s.resource != w.resource || s.life.isDead() {
					continue
				}
				waiting = false
				at := s.received.Load()
				if delivered {
					at = s.observed.Load()
				}
				if s.matches(w.name, w.labels) && at < w.rv {
					waiting = true
					break
				}
			}
			if waiting {
				missing = append(missing, fmt.Sprintf("%s/%s at %d", w.resource, w.name, w.rv))
				keep = append(keep, w)
			}
		}
		if delivered {
			p.pending = keep
			if c := p.catchup; c != "" && !p.caughtUp(c) {
				missing = append(missing, fmt.Sprintf("%s listed again (a time traveler catching up)", c))
			} else {
				p.catchup = ""
			}
		}
		p.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("%w; not yet delivered: %s", context.Cause(ctx), strings.Join(missing, ", "))
		}
	}
}
