package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/typedctrl/ctrl/bench/internal/probe"
)

// replicaRun is one replica of a sharded run, or the unsharded reference
// (replicas 0).
type replicaRun struct {
	replicas int
	identity string
	sharder  bool
	owned    int     // objects in its cache once the ring settled
	settle   float64 // s from the start of the replicas until the ring settled
	synced   probe.Mem
	updated  probe.Mem
	cpu      float64 // update phase, user+sys s
	events   int     // of its own objects
	gcs      uint32
	roundsS  []float64 // wall time of each round: patches written and every replica caught up
}

func (r replicaRun) cpuPer1k() float64 {
	if r.events == 0 {
		return 0
	}
	return r.cpu / (float64(r.events) / 1000)
}

// shardPhase runs the ConfigMap controller unsharded, then sharded at each
// replica count, each ring with a name of its own so that the labels of the
// last ring do not matter.
func (d *driver) shardPhase(ctx context.Context) error {
	c := d.c
	if err := createNamespace(ctx, d.cs, c.shardNS); err != nil {
		return err
	}
	t0 := time.Now()
	if err := createConfigMaps(ctx, d.cs, c.shardNS, c.shardN, c.writers); err != nil {
		return err
	}
	d.res.shardCreateSeconds = time.Since(t0).Seconds()
	logf("created %d ConfigMaps in %.1fs", c.shardN, d.res.shardCreateSeconds)
	round := 0
	for _, k := range append([]int{0}, c.replicas...) {
		runs, err := d.shardRun(ctx, k, &round)
		if err != nil {
			return fmt.Errorf("%d replicas: %w", k, err)
		}
		d.res.shard = append(d.res.shard, runs...)
	}
	return nil
}

// shardRun starts k replicas (0: one unsharded controller), waits until the
// sharder has given every object an owner and each replica has reconciled
// its own, measures them, and runs the update rounds.
func (d *driver) shardRun(ctx context.Context, k int, round *int) ([]replicaRun, error) {
	c := d.c
	ring := "ring" + strconv.Itoa(k)
	mode, n := "shard", max(k, 1)
	if k == 0 {
		mode = "cm"
	}
	logf("sharding: %d replicas (%s)", k, mode)
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
		args := []string{"-kubeconfig", d.kubeconfig, "-namespace", c.shardNS, "-n", strconv.Itoa(c.shardN), "-mode", mode,
			"-ring", ring, "-identity", id, "-workers", "8"}
		if c.profileDir != "" {
			args = append(args, "-profile-dir", c.profileDir, "-profile-tag", fmt.Sprintf("%s-%s", ring, id))
		}
		p, err := probe.Start(d.bins["scale-ctrl"], args, nil, filepath.Join(c.work, "logs", fmt.Sprintf("shard-%s-%s.log", ring, id)))
		if err != nil {
			return nil, err
		}
		procs[i] = p
		runs[i] = replicaRun{replicas: k, identity: id}
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
			runs[i].owned = a.Cached
			now[i] = a.Reconciles
		}
		settled := total == c.shardN
		for i := range runs {
			settled = settled && now[i] >= int64(runs[i].owned) && (last != nil && now[i] == last[i])
		}
		if settled {
			stable++
		} else {
			stable = 0
		}
		last = now
	}
	settle := time.Since(start).Seconds() - 4 // the two quiet polls
	holder := d.shardLeaseHolder(ctx, ring)
	for i, p := range procs {
		a, err := p.Do("measure")
		if err != nil {
			return nil, err
		}
		runs[i].synced, runs[i].settle = *a.Mem, settle
		runs[i].sharder = k > 0 && runs[i].identity == holder
	}
	for _, p := range procs {
		if _, err := p.Do("begin"); err != nil {
			return nil, err
		}
	}
	var rounds []float64
	for range c.g {
		*round++
		t0 := time.Now()
		if err := patchRound(ctx, d.cs, c.shardNS, "cm", c.shardN, *round, c.writers); err != nil {
			return nil, err
		}
		for i, p := range procs {
			if _, err := p.Do(fmt.Sprintf("round %d %d", *round, runs[i].owned)); err != nil {
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
		runs[i].cpu, runs[i].gcs, runs[i].events = a.UserSeconds+a.SysSeconds, a.GCs, runs[i].owned*c.g
		runs[i].roundsS = rounds
	}
	for i, p := range procs {
		a, err := p.Do("measure")
		if err != nil {
			return nil, err
		}
		runs[i].updated = *a.Mem
	}
	for i, p := range procs {
		if err := p.Exit(); err != nil {
			return nil, fmt.Errorf("%s: exit: %w", runs[i].identity, err)
		}
		procs[i] = nil
	}
	for _, r := range runs {
		logf("  %s%s: %d objects, heap %s MiB, peak rss %s MiB, %.3f CPU s per 1k own updates, settled %.1fs",
			r.identity, map[bool]string{true: " (sharder)"}[r.sharder], r.owned, mib(r.synced.HeapInuse), mibI(r.updated.MaxRSS), r.cpuPer1k(), r.settle)
	}
	return runs, nil
}
