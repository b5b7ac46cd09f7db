package leader

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := Config{Name: "l", Identity: "me", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"defaults", func(*Config) {}, ""},
		{"no name", func(c *Config) { c.Name = "" }, "must be set"},
		{"renew deadline too long", func(c *Config) { c.RenewDeadline = c.LeaseDuration }, "must be longer than RenewDeadline"},
		{"retry too slow", func(c *Config) { c.RetryPeriod = 9 * time.Second }, "must be longer than 1.2 times RetryPeriod"},
		{"sub-second lease", func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 500*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
		}, "at least a second"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.change(&c)
			err := c.Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}
