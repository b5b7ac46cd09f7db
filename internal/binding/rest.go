package binding

import (
	"context"
	"io"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
)

// restBackend serves one type from a real API server. Its scheme knows only
// T, List[T] and the meta types, which is all the codecs need; built-in types
// travel as protobuf unless the config asks otherwise.
type restBackend[T Object] struct {
	info   Info
	client *rest.RESTClient
	params runtime.ParameterCodec
	codec  runtime.NegotiatedSerializer
	opts   []gentype.Option[T]
}

func newRESTBackend[T Object](info Info, config *rest.Config, httpClient *http.Client) (*restBackend[T], error) {
	gv := info.GVR.GroupVersion()
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(info.GVK(), New[T]())
	scheme.AddKnownTypeWithName(gv.WithKind(info.Kind+"List"), &List[T]{})
	metav1.AddToGroupVersion(scheme, gv)

	cfg := rest.CopyConfig(config)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if httpClient == nil {
		var err error
		if httpClient, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, err
		}
	}
	client, err := rest.RESTClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	b := &restBackend[T]{info: info, client: client, params: runtime.NewParameterCodec(scheme), codec: cfg.NegotiatedSerializer}
	if info.Builtin {
		b.opts = []gentype.Option[T]{gentype.PrefersProtobuf[T]()}
	}
	return b, nil
}

func (b *restBackend[T]) typed(namespace string) *gentype.ClientWithList[T, *List[T]] {
	if !b.info.Namespaced {
		namespace = ""
	}
	return gentype.NewClientWithList(b.info.GVR.Resource, b.client, b.params, namespace, New[T],
		func() *List[T] { return &List[T]{} }, b.opts...)
}

func (b *restBackend[T]) Fake() bool { return false }

func (b *restBackend[T]) Get(ctx context.Context, namespace, name string, opts metav1.GetOptions) (T, error) {
	return b.typed(namespace).Get(ctx, name, opts)
}

func (b *restBackend[T]) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*List[T], error) {
	return b.typed(namespace).List(ctx, opts)
}

// Watch opens a Stream that decodes whole objects.
func (b *restBackend[T]) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	return b.stream(ctx, namespace, opts, StreamOptions{KeepManagedFields: true})
}

// stream opens a watch whose objects keep managedFields only if asked.
func (b *restBackend[T]) stream(ctx context.Context, namespace string, opts metav1.ListOptions, so StreamOptions) (watch.Interface, error) {
	var fs *fieldset
	if b.info.Builtin {
		var err error
		if fs, err = fieldsetFor(b.info.Type, nil, so.KeepManagedFields); err != nil {
			return nil, err
		}
	}
	body, err := b.open(ctx, namespace, opts)
	if err != nil {
		return nil, err
	}
	return newStream(body, b.codec, b.info.GVK(), protoDecoder[T](fs)), nil
}

// open starts a watch request and returns its body. Watches are not rate
// limited, as client-go's are not: a watch is one long request.
func (b *restBackend[T]) open(ctx context.Context, namespace string, opts metav1.ListOptions) (io.ReadCloser, error) {
	var timeout time.Duration
	if opts.TimeoutSeconds != nil {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	opts.Watch = true
	return b.client.Get().
		UseProtobufAsDefaultIfPreferred(b.info.Builtin).
		NamespaceIfScoped(namespace, b.info.Namespaced && namespace != "").
		Resource(b.info.GVR.Resource).
		VersionedParams(&opts, b.params).
		Timeout(timeout).
		Throttle(nil).
		Stream(ctx)
}

func (b *restBackend[T]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	return b.typed(obj.GetNamespace()).Create(ctx, obj, opts)
}

func (b *restBackend[T]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return b.typed(obj.GetNamespace()).Update(ctx, obj, opts)
}

func (b *restBackend[T]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return b.typed(obj.GetNamespace()).UpdateStatus(ctx, obj, opts)
}

func (b *restBackend[T]) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	return b.typed(namespace).Patch(ctx, name, pt, data, opts, subresources...)
}

func (b *restBackend[T]) Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return b.typed(namespace).Delete(ctx, name, opts)
}
