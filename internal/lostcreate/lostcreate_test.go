package lostcreate

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedctrl/ctrl/internal/probe"
)

// TestExpire checks that a create whose reply was lost is not remembered
// for the life of a program that never creates its key again.
func TestExpire(t *testing.T) {
	var c Creates[string]
	get := func(context.Context) (metav1.Object, error) {
		t.Fatal("the object was read, want no read")
		return nil, nil
	}
	ctx := context.Background()
	lostErr := probe.Tag(ctx, "", &net.OpError{Op: "read", Err: errors.New("connection reset")})
	const resource = "configmaps"
	c.Settle(ctx, resource, "ns/old", "1", lostErr, get)
	c.m[entryKey[string]{resource, "ns/old"}] = lost{ids: []string{"1"}, at: time.Now().Add(-ttl - time.Second)}
	c.Settle(ctx, resource, "ns/new", "2", lostErr, get)
	if _, ok := c.m[entryKey[string]{resource, "ns/old"}]; ok || len(c.m) != 1 {
		t.Errorf("lost creates: %v, want only the new one", c.m)
	}
	c.Settle(ctx, resource, "ns/new", "3", apierrors.NewBadRequest("invalid"), get)
	if len(c.m) != 1 {
		t.Errorf("a create the server refused forgot the lost one: %v", c.m)
	}
}
