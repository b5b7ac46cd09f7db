package integration_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/typedctrl/ctrl"
)

// podFacts is a projection that declares the fields it reads: the cache
// decodes only those of each Pod the server sends.
type podFacts struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Node       string
	Phase      corev1.PodPhase
	Images     []string
	Conditions []corev1.PodCondition
}

func (p *podFacts) DeepCopyObject() runtime.Object {
	out := *p
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Images = slices.Clone(p.Images)
	out.Conditions = slices.Clone(p.Conditions)
	return &out
}

func factsOf(pod *corev1.Pod) *podFacts {
	f := &podFacts{Node: pod.Spec.NodeName, Phase: pod.Status.Phase, Conditions: slices.Clone(pod.Status.Conditions)}
	pod.ObjectMeta.DeepCopyInto(&f.ObjectMeta)
	for _, c := range pod.Spec.Containers {
		f.Images = append(f.Images, c.Image)
	}
	return f
}

func init() {
	if err := ctrl.Project(factsOf, "spec.nodeName", "spec.containers.image", "status.phase", "status.conditions"); err != nil {
		panic(err)
	}
}

// TestDecodeMatchesClientGo checks, on a real API server, that what the
// caches decode of what the server sends (in part: without managedFields,
// metadata only, a projection's fields) is exactly what client-go's
// decoding of the whole object gives, cut down by hand: after the initial
// list and after changes that arrive as watch events.
func TestDecodeMatchesClientGo(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	pods := clientset.CoreV1().Pods(ns)
	_, err := pods.Create(ctx, richPod("rich"), metav1.CreateOptions{})
	must(t, err)
	_, err = clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Labels: map[string]string{"a": "b"}},
		Data: map[string]string{"config.yaml": "x: 1\n"}, BinaryData: map[string][]byte{"blob": {0, 1, 2, 255}}}, metav1.CreateOptions{})
	must(t, err)

	mgr := newManager(t, ns)
	full, err := ctrl.NewCache[*corev1.Pod](mgr, ctrl.CacheOptions{})
	must(t, err)
	managed, err := ctrl.NewCache[*corev1.Pod](mgr, ctrl.CacheOptions{KeepManagedFields: true})
	must(t, err)
	facts, err := ctrl.NewCache[*podFacts](mgr, ctrl.CacheOptions{})
	must(t, err)
	meta, err := ctrl.NewCache[*metav1.PartialObjectMetadata](mgr, ctrl.CacheOptions{Resource: ctrl.APIResource{Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true}})
	must(t, err)
	cms, err := ctrl.NewCache[*corev1.ConfigMap](mgr, ctrl.CacheOptions{})
	must(t, err)
	start(t, mgr)

	key := ctrl.Key{Namespace: ns, Name: "rich"}
	check := func(stage string) {
		t.Helper()
		eventually(t, 30*time.Second, func() error {
			want, err := pods.Get(ctx, "rich", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(want.ManagedFields) == 0 {
				return fmt.Errorf("the server recorded no managedFields")
			}
			noManaged := want.DeepCopy()
			noManaged.ManagedFields = nil
			same := func(what string, got runtime.Object, ok bool, want runtime.Object) error {
				if !ok {
					return fmt.Errorf("%s: not cached", what)
				}
				got = got.DeepCopyObject()
				got.GetObjectKind().SetGroupVersionKind(want.GetObjectKind().GroupVersionKind())
				if !apiequality.Semantic.DeepEqual(got, want) {
					return fmt.Errorf("%s %s:\n%+v\nwant (client-go's, cut down):\n%+v", stage, what, got, want)
				}
				return nil
			}
			p, ok := full.Get(key)
			if err := same("Pod without managedFields", p, ok, noManaged); err != nil {
				return err
			}
			p, ok = managed.Get(key)
			if err := same("Pod with managedFields", p, ok, want); err != nil {
				return err
			}
			f, ok := facts.Get(key)
			wantFacts := factsOf(noManaged)
			if err := same("projection", f, ok, wantFacts); err != nil {
				return err
			}
			m, ok := meta.Get(key)
			if err := same("metadata", m, ok, &metav1.PartialObjectMetadata{ObjectMeta: noManaged.ObjectMeta}); err != nil {
				return err
			}
			wantCM, err := clientset.CoreV1().ConfigMaps(ns).Get(ctx, "cm", metav1.GetOptions{})
			if err != nil {
				return err
			}
			wantCM.ManagedFields = nil
			c, ok := cms.Get(ctrl.Key{Namespace: ns, Name: "cm"})
			return same("ConfigMap", c, ok, wantCM)
		})
	}
	check("listed")

	// Changes arrive as watch events: labels, the spec's image, the status.
	_, err = pods.Patch(ctx, "rich", types.StrategicMergePatchType,
		[]byte(`{"metadata":{"labels":{"tier":"gold"}},"spec":{"containers":[{"name":"server","image":"registry.example/server:2"}]}}`), metav1.PatchOptions{})
	must(t, err)
	pod, err := pods.Get(ctx, "rich", metav1.GetOptions{})
	must(t, err)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(), Reason: "Started"}}
	pod.Status.PodIP = "10.0.0.7"
	_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	must(t, err)
	_, err = clientset.CoreV1().ConfigMaps(ns).Patch(ctx, "cm", types.MergePatchType, []byte(`{"data":{"more":"yes"}}`), metav1.PatchOptions{})
	must(t, err)
	check("watched")
}

// richPod sets many kinds of fields: nested messages, lists, maps,
// quantities, pointers, numbers.
func richPod(name string) *corev1.Pod {
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
		PeriodSeconds: 10, FailureThreshold: 3}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"app.kubernetes.io/name": "rich", "pod-template-hash": "5d4f8b9c7"},
			Annotations: map[string]string{"bench/round": "1", "checksum/config": "abcdef0123456789"},
			Finalizers:  []string{"example.com/keep"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rich-5d4f8b9c7",
				UID: "00000000-0000-4000-8000-000000000001", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "registry.example/init:1", Command: []string{"/init", "--wait"}}},
			Containers: []corev1.Container{
				{Name: "server", Image: "registry.example/server:1", Args: []string{"--listen=:8080"},
					Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					Env:       []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
					Resources: res, LivenessProbe: probe, ReadinessProbe: probe,
					VolumeMounts:    []corev1.VolumeMount{{Name: "config", MountPath: "/etc/rich", ReadOnly: true}},
					SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}},
				{Name: "proxy", Image: "registry.example/proxy:1", Resources: res},
			},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Gi"))}}},
			},
			NodeName:                      "node-7",
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Tolerations:                   []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}},
			NodeSelector:                  map[string]string{"kubernetes.io/os": "linux"},
		},
	}
}
