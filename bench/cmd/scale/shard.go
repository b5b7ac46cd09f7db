package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl/bench/internal/probe"
)

// replicaRun is one replica of a sharded run, or the unsharded reference
// (replicas 0).
type replicaRun struct {
	Replicas int
	Mode     string // "server" or "labels"; "" unsharded
	Identity string
	Labeled  int     // objects the ring labeled (label mode: once each)
	Owned    int     // objects in its cache once the ring settled
	Settle   float64 // s from the start of the replicas until the ring settled
	Synced   probe.Mem
	Updated  probe.Mem
	CPU      float64 // update phase, user+sys s
	Events   int     // of its own objects
	GCs      uint32
	RoundsS  []float64 // wall time of each round: patches written and every replica caught up
}

func (r replicaRun) cpuPer1k() float64 {
	if r.Events == 0 {
		return 0
	}
	return r.CPU / (float64(r.Events) / 1000)
}

// shardPhase runs the ConfigMap controller unsharded, then sharded at each
// replica count in label mode and where the API server selects by hash,
// each ring with a name of its own so that the labels of the last ring do
// not matter.
func (d *driver) shardPhase(ctx context.Context) error {
	c := d.c
	if err := createNamespace(ctx, d.cs, c.ShardNS); err != nil {
		return err
	}
	t0 := time.Now()
	if err := createConfigMaps(ctx, d.cs, c.ShardNS, c.ShardN, c.Writers); err != nil {
		return err
	}
	d.res.ShardCreateSeconds = time.Since(t0).Seconds()
	logf("created %d ConfigMaps in %.1fs", c.ShardN, d.res.ShardCreateSeconds)
	round := 0
	runs, err := d.shardRun(ctx, 0, "", &round)
	if err != nil {
		return fmt.Errorf("unsharded: %w", err)
	}
	d.res.Shard = append(d.res.Shard, runs...)
	for _, mode := range []string{"labels", "server"} {
		for _, k := range c.Replicas {
			runs, err := d.shardRun(ctx, k, mode, &round)
			if err != nil {
				return fmt.Errorf("%d replicas, mode %s: %w", k, mode, err)
			}
			d.res.Shard = append(d.res.Shard, runs...)
		}
	}
	return nil
}

// shardRun starts k replicas (0: one unsharded controller) in mode
// ("labels" or "server"), waits until every object is in exactly one
// replica's cache and each replica has reconciled its own, measures them,
// and runs the update rounds.
func (d *driver) shardRun(ctx context.Context, k int, shardMode string, round *int) ([]replicaRun, error) {
	c := d.c
	ring := shardMode + strconv.Itoa(k)
	mode, n := "shard", max(k, 1)
	if k == 0 {
		mode = "cm"
	}
	logf("sharding: %d replicas (%s %s)", k, mode, shardMode)
	procs := make([]*probe.Proc, n)
	runs := make([]replicaRun, n)
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.Kill()
			}
		}
	}()
	start := time.Now()
	for i := range n {
		id := fmt.Sprintf("replica-%d", i+1)
		args := []string{"-kubeconfig", d.kubeconfig, "-namespace", c.ShardNS, "-n", strconv.Itoa(c.ShardN), "-mode", mode,
			"-ring", ring, "-identity", id, "-workers", "8"}
		if shardMode == "labels" {
			args = append(args, "-by-label")
		}
		if c.ProfileDir != "" {
			args = append(args, "-profile-dir", c.ProfileDir, "-profile-tag", fmt.Sprintf("%s-%s", ring, id))
		}
		p, err := probe.Start(d.bins["scale-ctrl"], args, nil, filepath.Join(c.Work, "logs", fmt.Sprintf("shard-%s-%s.log", ring, id)))
		if err != nil {
			return nil, err
		}
		procs[i] = p
		runs[i] = replicaRun{Replicas: k, Mode: shardMode, Identity: id}
	}
	// Settled: every object is in exactly one replica's cache, each
	// replica has reconciled what it holds, and nothing moved for two polls.
	var last []int64
	stable := 0
	deadline := time.Now().Add(10 * time.Minute)
	for stable < 2 {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the ring did not settle within 10 minutes")
		}
		time.Sleep(2 * time.Second)
		total, now := 0, make([]int64, n)
		for i, p := range procs {
			a, err := p.Do("status")
			if err != nil {
				return nil, err
			}
			total += a.Cached
			runs[i].Owned = a.Cached
			now[i] = a.Reconciles
		}
		settled := total == c.ShardN
		for i := range runs {
			settled = settled && now[i] >= int64(runs[i].Owned) && (last != nil && now[i] == last[i])
		}
		if settled {
			stable++
		} else {
			stable = 0
		}
		last = now
	}
	settle := time.Since(start).Seconds() - 4 // the two quiet polls
	labeled := 0
	if k > 0 {
		var err error
		if labeled, err = d.shardLabeled(ctx, ring); err != nil {
			return nil, err
		}
		if got := d.shardMode(ctx, ring, runs[0].Identity); got != shardMode {
			return nil, fmt.Errorf("ring %s runs in mode %q, want %q (is ShardedListAndWatch on?)", ring, got, shardMode)
		}
	}
	for i, p := range procs {
		a, err := p.Do("measure")
		if err != nil {
			return nil, err
		}
		runs[i].Synced, runs[i].Settle, runs[i].Labeled = *a.Mem, settle, labeled
	}
	for _, p := range procs {
		if _, err := p.Do("begin"); err != nil {
			return nil, err
		}
	}
	var rounds []float64
	for range c.G {
		*round++
		t0 := time.Now()
		if err := patchRound(ctx, d.cs, c.ShardNS, "cm", c.ShardN, *round, c.Writers); err != nil {
			return nil, err
		}
		for i, p := range procs {
			if _, err := p.Do(fmt.Sprintf("round %d %d", *round, runs[i].Owned)); err != nil {
				return nil, err
			}
		}
		rounds = append(rounds, time.Since(t0).Seconds())
	}
	for i, p := range procs {
		a, err := p.Do("end")
		if err != nil {
			return nil, err
		}
		runs[i].CPU, runs[i].GCs, runs[i].Events = a.UserSeconds+a.SysSeconds, a.GCs, runs[i].Owned*c.G
		runs[i].RoundsS = rounds
	}
	for i, p := range procs {
		a, err := p.Do("measure")
		if err != nil {
			return nil, err
		}
		runs[i].Updated = *a.Mem
	}
	for i, p := range procs {
		if err := p.Exit(); err != nil {
			return nil, fmt.Errorf("%s: exit: %w", runs[i].Identity, err)
		}
		procs[i] = nil
	}
	for _, r := range runs {
		logf("  %s: %d objects, heap %s MiB, peak rss %s MiB, %.3f CPU s per 1k own updates, settled %.1fs, %d labeled",
			r.Identity, r.Owned, mib(r.Synced.HeapInuse), mibI(r.Updated.MaxRSS), r.cpuPer1k(), r.Settle, r.Labeled)
	}
	return runs, nil
}

// shardLabeled counts the objects that carry ring's shard label.
func (d *driver) shardLabeled(ctx context.Context, ring string) (int, error) {
	l, err := d.cs.CoreV1().ConfigMaps(d.c.ShardNS).List(ctx, metav1.ListOptions{LabelSelector: "shard.ctrl.dev/" + ring})
	if err != nil {
		return 0, err
	}
	return len(l.Items), nil
}

// shardMode reads the mode a replica of ring publishes in its Lease:
// "server" or "labels".
func (d *driver) shardMode(ctx context.Context, ring, identity string) string {
	l, err := d.cs.CoordinationV1().Leases(d.c.ShardNS).Get(ctx, ring+"."+identity, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	mode, _, _ := strings.Cut(l.Annotations["shard.ctrl.dev/mode"], " ")
	return mode
}
