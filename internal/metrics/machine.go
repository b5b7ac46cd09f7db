package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Machines are the metrics of state machines: objects per state, moves
// between states, and time spent in a state. Every label value is a
// machine's name or one of its declared states, so the series are bounded.
type Machines struct {
	objects     *objectsCollector
	transitions *prometheus.CounterVec
	durations   *prometheus.HistogramVec
}

// NewMachines registers the machine metrics with reg, reusing collectors
// already there.
func NewMachines(reg prometheus.Registerer) (*Machines, error) {
	m := &Machines{
		objects: &objectsCollector{desc: prometheus.NewDesc("ctrl_machine_objects",
			"Objects in each state of a state machine, counted in its controller's cache.",
			[]string{"machine", "state"}, nil)},
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ctrl_machine_transitions_total",
			Help: "Moves of objects from one state of a state machine to another, counted once written.",
		}, []string{"machine", "from", "to"}),
		// A state's entry time is a condition's lastTransitionTime, which
		// has seconds only: no buckets below a second.
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ctrl_machine_state_duration_seconds",
			Help:    "Time objects spent in a state of a state machine, observed when they leave it.",
			Buckets: []float64{1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 12 * 3600, 24 * 3600},
		}, []string{"machine", "state"}),
	}
	var err error
	if m.objects, err = register(reg, m.objects); err != nil {
		return nil, err
	}
	if m.transitions, err = register(reg, m.transitions); err != nil {
		return nil, err
	}
	if m.durations, err = register(reg, m.durations); err != nil {
		return nil, err
	}
	return m, nil
}

// Machine is one machine's series.
type Machine struct {
	name        string
	transitions *prometheus.CounterVec
	durations   *prometheus.HistogramVec
}

// Machine returns the series of the machine named name. states are its
// states and edges its declared moves, whose counts exist from the start.
// count is called at each scrape and calls add with the state of each
// object; states that are not among states are not counted.
func (m *Machines) Machine(name string, states []string, edges [][2]string, count func(add func(state string))) Machine {
	for _, e := range edges {
		m.transitions.WithLabelValues(name, e[0], e[1])
	}
	m.objects.add(objectsSource{machine: name, states: states, count: count})
	return Machine{name: name, transitions: m.transitions, durations: m.durations}
}

// Moved counts a move from one state to another. If entered is not zero,
// the time since then is observed as the time spent in from.
func (m Machine) Moved(from, to string, entered time.Time) {
	m.transitions.WithLabelValues(m.name, from, to).Inc()
	if !entered.IsZero() {
		m.durations.WithLabelValues(m.name, from).Observe(time.Since(entered).Seconds())
	}
}

// objectsCollector reports the objects per state by counting them at each
// scrape: the controller's cache already knows every object's state, so
// there is no gauge to keep in step with creations and deletions. Machines
// of several managers sharing a registry add up.
type objectsCollector struct {
	desc *prometheus.Desc

	mu      sync.Mutex
	sources []objectsSource
}

type objectsSource struct {
	machine string
	states  []string
	count   func(add func(state string))
}

func (c *objectsCollector) add(s objectsSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources = append(c.sources, s)
}

func (c *objectsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *objectsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sources := append([]objectsSource(nil), c.sources...)
	c.mu.Unlock()
	type series struct{ machine, state string }
	var order []series
	counts := map[series]float64{}
	for _, s := range sources {
		for _, st := range s.states {
			k := series{s.machine, st}
			if _, ok := counts[k]; !ok {
				order = append(order, k)
				counts[k] = 0
			}
		}
		s.count(func(state string) {
			k := series{s.machine, state}
			if _, declared := counts[k]; declared {
				counts[k]++
			}
		})
	}
	for _, k := range order {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, counts[k], k.machine, k.state)
	}
}
