// Package denied keeps what the API server refuses one list-and-watch of a
// cache. A forbidden list or watch is no outage: retrying will not help
// until the permission is granted, so it is reported at once and every
// [Reminder] while it lasts, and a permission after a refusal is logged
// once.
package denied

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Reminder is how often a lasting refusal is logged again, and a refused
// list asked again.
const Reminder = time.Minute

// Target is what a list-and-watch reads, as its refusals name it.
type Target struct {
	Resource   schema.GroupResource
	Namespaced bool   // the resource is namespaced
	Namespace  string // "" for all namespaces
	Cluster    string // "" for the manager's own
}

// Verbs records the verbs the server refuses one list-and-watch. The zero
// value records refusals and logs nothing; Start it before the first list.
// Safe for concurrent use.
type Verbs struct {
	mu       sync.Mutex
	m        map[string]*denial
	probed   bool // the list permission was checked
	rechecks sync.WaitGroup
	ctx      context.Context
	log      logr.Logger
	target   Target
	list     func(context.Context) error
}

type denial struct {
	err    error // the server's answer, last seen
	since  time.Time
	logged time.Time
	count  int
}

// Start sets the logger, what the refusals name, and list, which asks the
// server for one object to check the list permission; the rechecks of a
// refused list run until ctx is done. Call Wait after ctx is done.
func (v *Verbs) Start(ctx context.Context, log logr.Logger, target Target, list func(context.Context) error) {
	v.mu.Lock()
	v.ctx, v.log, v.target, v.list = ctx, log, target, list
	v.mu.Unlock()
}

// Wait blocks until the rechecks end, which they do once Start's context is
// done.
func (v *Verbs) Wait() { v.rechecks.Wait() }

// Note records the server's answer to verb ("list" or "watch"): a refusal
// is logged at once and every Reminder, a permission after a refusal once;
// other errors change nothing. A refused list is asked again every
// Reminder, since a feed whose watch works lists no more and would not
// notice the grant.
func (v *Verbs) Note(verb string, err error) {
	forbidden := apierrors.IsForbidden(err)
	if err != nil && !forbidden {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	d, was := v.m[verb]
	now := time.Now()
	switch {
	case !forbidden && was:
		delete(v.m, verb)
		v.log.Info("allowed now", "verb", verb, "forbiddenFor", now.Sub(d.since).Round(time.Second).String())
	case !forbidden:
	case !was:
		if v.m == nil {
			v.m = map[string]*denial{}
		}
		d = &denial{err: err, since: now, logged: now, count: 1}
		v.m[verb] = d
		v.log.Error(v.errorOf(verb, d), "forbidden: grant the RBAC rule; retrying meanwhile")
		if ctx, list := v.ctx, v.list; verb == "list" && ctx != nil && list != nil {
			v.rechecks.Go(func() { v.recheckList(ctx, list) })
		}
	default:
		d.err = err
		d.count++
		if now.Sub(d.logged) >= Reminder {
			d.logged = now
			v.log.Error(v.errorOf(verb, d), "still forbidden: grant the RBAC rule; retrying meanwhile",
				"attempts", d.count, "for", now.Sub(d.since).Round(time.Second).String())
		}
	}
}

// Probe asks for one object the first time it is called, before a streamed
// list: a feed that lists by watching would otherwise miss a missing list
// permission.
func (v *Verbs) Probe(ctx context.Context) {
	v.mu.Lock()
	probed, list := v.probed, v.list
	v.probed = true
	v.mu.Unlock()
	if !probed && list != nil {
		v.Note("list", list(ctx))
	}
}

// recheckList asks for one object every Reminder while the list is refused.
func (v *Verbs) recheckList(ctx context.Context, list func(context.Context) error) {
	t := time.NewTicker(Reminder)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if v.ForbiddenTo("list") == nil {
			return
		}
		err := list(ctx)
		if ctx.Err() != nil {
			return
		}
		v.Note("list", err)
	}
}

// Forbidden returns the refusal now, the list's first, or nil.
func (v *Verbs) Forbidden() error {
	for _, verb := range []string{"list", "watch"} {
		if err := v.ForbiddenTo(verb); err != nil {
			return err
		}
	}
	return nil
}

// ForbiddenTo returns the refusal of verb now, or nil. The error names the
// rule to add and wraps the server's answer.
func (v *Verbs) ForbiddenTo(verb string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if d := v.m[verb]; d != nil {
		return v.errorOf(verb, d)
	}
	return nil
}

// errorOf names the refusal and the rule to add, wrapping the answer.
func (v *Verbs) errorOf(verb string, d *denial) error {
	t := v.target
	rule := fmt.Sprintf(`{apiGroups: [%q], resources: [%q], verbs: [%q]}`, t.Resource.Group, t.Resource.Resource, verb)
	var where, to string
	switch {
	case !t.Namespaced:
		to = "a ClusterRole"
	case t.Namespace == "":
		where, to = " in all namespaces", "a ClusterRole"
	default:
		where, to = fmt.Sprintf(" in namespace %q", t.Namespace), fmt.Sprintf("a Role in namespace %q, or a ClusterRole,", t.Namespace)
	}
	if t.Cluster != "" {
		where += fmt.Sprintf(" of cluster %q", t.Cluster)
	}
	return fmt.Errorf("forbidden to %s %s%s: add the rule %s to %s bound to the manager's identity: %w", verb, t.Resource, where, rule, to, d.err)
}
