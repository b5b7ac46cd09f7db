package ctrl

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedctrl/ctrl/internal/act"
	"github.com/typedctrl/ctrl/internal/binding"
	"github.com/typedctrl/ctrl/internal/scope"
)

type use[T Object] struct {
	handler handler[T] // registered before the cache can start; nil: none
	private string     // a cache shared with no other caller, under this name
	trim    func(T) T  // what a private cache's objects pass through first
	pin     bool       // held for the manager's life; else a user, for Manager.unuse
	either  bool       // an existing cache will do, optional or required (Owns)
	share   shareKind  // whether the manager's policy may split the objects
}

// shareKind says whether objects may be split among replicas (own, or owned).
type shareKind uint8

const (
	noShare shareKind = iota
	ownShare
	relatedShare
)

// makeCache returns the cache of T for opts; a private one is shared with no one.
func makeCache[T Object](m *Manager, opts CacheOptions, u use[T]) (*Cache[T], error) {
	var b *binding.Binding[T]
	var err error
	if opts.Fleet {
		var res *binding.Info
		var info binding.Info
		if res, err = opts.Resource.info(reflect.TypeFor[T]()); err == nil {
			info, err = binding.InfoFor[T](res)
		}
		if err != nil {
			return nil, fmt.Errorf("ctrl: %w", err)
		}
		b = &binding.Binding[T]{Info: info}
	} else if b, err = bind[T](m, opts.Resource); err != nil {
		return nil, err
	}
	if !b.Watchable {
		return nil, fmt.Errorf("ctrl: cache of %s: the resource cannot be listed or watched", b.Info)
	}
	if opts.Optional {
		if err := checkOptional(m, b.Info, opts); err != nil {
			return nil, err
		}
	}
	opts.Resource = APIResource{} // in the binding now
	sc := scope.New(b.Namespaced, m.opts.Namespace, opts.Namespaces, opts.LabelSelector, opts.FieldSelector)
	opts.Namespaces = sc.Namespaces
	var c *Cache[T] // made below, unless one exists
	var sh act.Share
	if u.share != noShare && !opts.Fleet {
		if sh, err = shareOf(m, b, u.share == relatedShare, sc, &c); err != nil {
			return nil, err
		}
		if sh == nil {
			u.share = noShare
		}
	}
	id := cacheID{typ: b.Type, gvr: b.GVR, scope: sc.String(), keepManaged: opts.KeepManagedFields, fleet: opts.Fleet,
		private: u.private, share: u.share}
	m.mu.Lock()
	if mc, ok := m.caches[id]; ok {
		if sh != nil {
			sh.Release() // the cache has its own
		}
		c := mc.(*Cache[T])
		if !u.either && (c.opt != nil) != opts.Optional {
			m.mu.Unlock()
			what := map[bool]string{true: "optional", false: "required"}
			return nil, fmt.Errorf("ctrl: cache of %s: asked for as %s, but it exists as %s", c, what[opts.Optional], what[c.opt != nil])
		}
		c.refs.hold(u.pin)
		m.mu.Unlock()
		if u.handler != nil {
			if err := c.addHandler(u.handler); err != nil {
				m.unuse(c)
				return nil, fmt.Errorf("ctrl: %s: %w", c.describe(), err)
			}
		}
		return c, nil
	}
	c = &Cache[T]{
		mgr:    m,
		b:      b,
		opts:   opts,
		scope:  sc,
		share:  sh,
		kind:   b.Kind,
		synced: make(chan struct{}),
		userTF: u.trim,
	}
	c.typeMeta = typeMetaOf(b.Info)
	c.refs.id = id
	c.refs.hold(u.pin)
	if u.handler != nil {
		c.handlers = append(c.handlers, u.handler)
	}
	if sh != nil {
		sh.Objects(c.count)
	}
	c.rewire.Lock()
	c.refeed(forgotten) // planned now, started when the cache runs
	c.rewire.Unlock()
	var members []*member
	switch {
	case opts.Fleet:
		c.members = map[string]*binding.Binding[T]{}
		m.fleetCaches = append(m.fleetCaches, c)
		for _, mb := range m.members {
			members = append(members, mb)
		}
	case opts.Optional:
		c.opt = newOptional(m, b.Info) // feeds come with the CRD
	}
	m.caches[id] = c
	m.cacheList = append(m.cacheList, c)
	if m.running != nil {
		m.startCache(c)
	}
	m.mu.Unlock()
	if c.opt != nil {
		if err := c.watchCRD(); err != nil {
			m.unuse(c)
			return nil, err
		}
	}
	for _, mb := range members {
		if err := c.engage(mb); err != nil {
			return nil, err
		}
	}
	return c, nil
}

type cacheID struct {
	typ         reflect.Type
	gvr         schema.GroupVersionResource
	scope       string
	keepManaged bool
	fleet       bool
	private     string
	share       shareKind
}
