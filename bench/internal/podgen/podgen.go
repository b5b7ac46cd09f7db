// Package podgen makes the Pods of the scale benchmark: what a Deployment's
// ReplicaSet creates for a typical service, several KiB each, so that a
// cache of them weighs what a real cluster's does. No scheduler or kubelet
// runs, so they stay Pending with no node: to the API server they are just
// objects.
package podgen

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// RoundAnnotation holds the round of the last update the driver wrote to an
// object; objects are created at round 0.
const RoundAnnotation = "bench/round"

// Name returns the name of the i-th object with prefix ("pod", "cm").
func Name(prefix string, i int) string { return fmt.Sprintf("%s-%06d", prefix, i) }

// Index returns the index in a name made by Name, or -1.
func Index(name string) int {
	for j := len(name) - 1; j >= 0; j-- {
		if name[j] == '-' {
			i, err := strconv.Atoi(name[j+1:])
			if err != nil {
				return -1
			}
			return i
		}
	}
	return -1
}

// Round returns the round recorded in annotations, 0 if none.
func Round(annotations map[string]string) int {
	g, _ := strconv.Atoi(annotations[RoundAnnotation])
	return g
}

// services are the apps the Pods belong to, 50 Pods to each ReplicaSet.
const perReplicaSet = 50

// Pod returns the i-th benchmark Pod in namespace: three containers (the
// app, a sidecar, an init container) with environment variables,
// resources, probes and volume mounts, four volumes, labels, annotations,
// an owner reference and tolerations. About 5.5 KiB as JSON, before the
// managedFields the server adds.
func Pod(namespace string, i int) *corev1.Pod {
	app := fmt.Sprintf("svc-%03d", i/perReplicaSet%200)
	rs := fmt.Sprintf("%s-%08x", app, uint32(i/perReplicaSet)*2654435761)
	env := func(prefix string, n int) []corev1.EnvVar {
		out := []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
		}
		for k := range n {
			out = append(out, corev1.EnvVar{Name: fmt.Sprintf("%s_SETTING_%02d", prefix, k), Value: fmt.Sprintf("value-%s-%d-%s", app, k, "abcdefghijklmnop")})
		}
		return out
	}
	res := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)},
		}
	}
	probe := func(path string, port int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port), Scheme: corev1.URISchemeHTTP}},
			InitialDelaySeconds: 5, PeriodSeconds: 10, TimeoutSeconds: 2, FailureThreshold: 3, SuccessThreshold: 1,
		}
	}
	mounts := []corev1.VolumeMount{
		{Name: "config", MountPath: "/etc/" + app, ReadOnly: true},
		{Name: "tls", MountPath: "/var/run/tls", ReadOnly: true},
		{Name: "cache", MountPath: "/var/cache/" + app},
		{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      Name("pod", i),
			Namespace: namespace,
			Labels: map[string]string{
				"app.kubernetes.io/name":       app,
				"app.kubernetes.io/instance":   app + "-prod",
				"app.kubernetes.io/version":    "1.24.3",
				"app.kubernetes.io/component":  "server",
				"app.kubernetes.io/part-of":    "ctrl-bench",
				"app.kubernetes.io/managed-by": "helm",
				"pod-template-hash":            rs[len(app)+1:],
			},
			Annotations: map[string]string{
				RoundAnnotation:                     "0",
				"prometheus.io/scrape":              "true",
				"prometheus.io/port":                "9090",
				"checksum/config":                   fmt.Sprintf("%064x", uint64(i/perReplicaSet)*0x9e3779b97f4a7c15),
				"kubectl.kubernetes.io/restartedAt": "2026-11-30T12:00:00Z",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs,
				UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i/perReplicaSet)), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{
				Name: "migrate", Image: "registry.example.com/" + app + "/migrate:1.24.3",
				Command: []string{"/bin/migrate", "--config=/etc/" + app + "/config.yaml", "--wait-for-db"},
				Env:     env("MIGRATE", 3), Resources: res("100m", "64Mi"), VolumeMounts: mounts[:1],
			}},
			Containers: []corev1.Container{
				{
					Name: "server", Image: "registry.example.com/" + app + "/server:1.24.3",
					Args:  []string{"--config=/etc/" + app + "/config.yaml", "--listen=:8080", "--metrics=:9090", "--log-level=info"},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}},
					Env:   env("APP", 10), Resources: res("500m", "512Mi"),
					LivenessProbe: probe("/healthz", 8080), ReadinessProbe: probe("/readyz", 8080),
					VolumeMounts: mounts, ImagePullPolicy: corev1.PullIfNotPresent,
					SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true),
						AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				},
				{
					Name: "proxy", Image: "registry.example.com/mesh/proxy:1.21.0",
					Args:  []string{"proxy", "sidecar", "--domain=$(POD_NAMESPACE).svc.cluster.local", "--concurrency=2"},
					Ports: []corev1.ContainerPort{{Name: "proxy-admin", ContainerPort: 15000, Protocol: corev1.ProtocolTCP}},
					Env:   env("PROXY", 5), Resources: res("100m", "128Mi"),
					ReadinessProbe: probe("/healthz/ready", 15021),
					VolumeMounts:   mounts[1:], ImagePullPolicy: corev1.PullIfNotPresent,
				},
			},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}}}},
				{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: app + "-tls"}}},
				{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Gi"))}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				}}}},
			},
			ServiceAccountName:            app,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			PriorityClassName:             "",
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			},
			NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
		},
	}
}
