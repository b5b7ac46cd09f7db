package ctrl

import (
	"context"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/crd"
)

// crdResource is where the API server serves CustomResourceDefinitions.
var crdResource = APIResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions",
	Kind: "CustomResourceDefinition", ClusterScoped: true}

// optional is what a cache knows of its CRD, watched by name, unstructured.
type optional struct {
	*crd.Follower
	ready chan struct{} // closed once crds is set
	crds  *Cache[*unstructured.Unstructured]
}

func checkOptional(m *Manager, info binding.Info, opts CacheOptions) error {
	switch {
	case opts.Fleet:
		return fmt.Errorf("ctrl: cache of %s: Optional: fleet caches are not supported", info)
	case info.Builtin || info.GVR.Group == "":
		return fmt.Errorf("ctrl: cache of %s: Optional: the kind is built in, and always served", info)
	}
	// Bound now, so that a manager that cannot read CRDs fails when wiring.
	if _, err := bind[*unstructured.Unstructured](m, crdResource); err != nil {
		return fmt.Errorf("ctrl: cache of %s: Optional: watching its CustomResourceDefinition: %w", info, err)
	}
	return nil
}

func newOptional(m *Manager, info binding.Info) *optional {
	name := crdName(info)
	return &optional{Follower: crd.NewFollower(name, info.GVR.Version, m.metrics.WaitingForCRD.WithLabelValues(name)),
		ready: make(chan struct{})}
}

func (c *Cache[T]) watchCRD() error {
	o := c.opt
	crds, err := makeCache(c.mgr, CacheOptions{
		Resource:      crdResource,
		FieldSelector: fields.OneTermEqualSelector("metadata.name", o.Name),
	}, use[*unstructured.Unstructured]{handler: kicker{o.Follower}, private: fmt.Sprintf("crd of %p", c), trim: crd.Trim})
	if err != nil {
		return fmt.Errorf("ctrl: cache of %s: Optional: watching its CustomResourceDefinition: %w", c, err)
	}
	o.crds = crds
	close(o.ready)
	return nil
}

func (o *optional) lastError() error {
	select {
	case <-o.ready:
		return o.crds.lastError()
	default:
		return nil
	}
}

type kicker struct{ *crd.Follower }

func (k kicker) changed(event[*unstructured.Unstructured])  { k.Kick() }
func (k kicker) listed([]event[*unstructured.Unstructured]) { k.Kick() }

// follow runs the cache's feeds while its CRD serves its version, until ctx is done.
func (c *Cache[T]) follow(ctx context.Context, log logr.Logger) {
	o := c.opt
	select {
	case <-o.ready:
	case <-ctx.Done():
		return
	}
	select {
	case <-o.crds.synced:
	case <-ctx.Done():
		return
	}
	o.Run(ctx, log, crd.Hooks{
		Get: func() *unstructured.Unstructured {
			def, _ := o.crds.Get(Key{Name: o.Name})
			return def
		},
		Serve: func(uid types.UID, removed bool) {
			gone := forgotten
			if removed {
				gone = deleted
			}
			c.rewire.Lock()
			c.served = uid
			c.refeed(gone)
			c.rewire.Unlock()
		},
		Unserved: c.markSynced, // in step with the server, which serves none
		Users:    c.users,
		Acted:    func() { c.mgr.activity.Add(1) },
	})
}

func (c *Cache[T]) users() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for _, h := range c.handlers {
		if u, ok := h.(user); ok {
			out = append(out, u.user())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Served reports whether the API server serves the cache's kind, as far as
// the cache knows: false while an optional cache waits for its CRD or a
// required one's last list or watch got 404.
func (c *Cache[T]) Served() bool {
	if c.opt != nil {
		return c.opt.Served() && c.HasSynced()
	}
	for _, f := range c.ownFeeds() {
		if f.notServed.Load() {
			return false
		}
	}
	return true
}

// waitingForCRD says, for /readyz, that the cache waits for its CRD, or "".
func (c *Cache[T]) waitingForCRD() string {
	if c.opt == nil {
		return ""
	}
	return c.opt.Waiting(c.String(), c.users)
}

func crdName(info binding.Info) string { return info.GVR.Resource + "." + info.GVR.Group }

// notServedError names the CRD a 404 points at.
func (c *Cache[T]) notServedError(err error) error {
	if err == nil || !apierrors.IsNotFound(err) || c.b.Builtin || c.b.GVR.Group == "" {
		return err
	}
	return fmt.Errorf("CustomResourceDefinition %s is missing or does not serve %s: %w", crdName(c.b.Info), c.b.GVR.Version, err)
}
