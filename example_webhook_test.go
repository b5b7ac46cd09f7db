package ctrl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/typedctrl/ctrl"
)

// A validating webhook: Widgets larger than 10 are refused, with the field
// at fault, and Widgets of size 0 get a warning.
func ExampleValidate() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeDynamic: newWidgetFake()})
	if err != nil {
		panic(err)
	}
	err = ctrl.Validate(mgr, ctrl.Validator[*Widget]{
		Create: func(ctx context.Context, w *Widget) error {
			if w.Spec.Size > 10 {
				return field.Invalid(field.NewPath("spec", "size"), w.Spec.Size, "must be at most 10")
			}
			if w.Spec.Size == 0 {
				ctrl.AdmissionWarning(ctx, "a Widget of size 0 does nothing")
			}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}

	// In a cluster the API server calls the manager's webhook server over
	// TLS (Options.WebhookAddress); here httptest stands in for both.
	srv := httptest.NewServer(mgr.WebhookHandler())
	defer srv.Close()
	for _, size := range []int{0, 11} {
		w := &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "w1"}, Spec: WidgetSpec{Size: size}}
		resp := admit(srv.URL+"/validate-example-com-v1-widget", admissionv1.Create, w)
		if resp.Allowed {
			fmt.Println("allowed, warnings:", resp.Warnings)
		} else {
			fmt.Println("denied:", resp.Result.Code, resp.Result.Message)
		}
	}
	// Output:
	// allowed, warnings: [a Widget of size 0 does nothing]
	// denied: 422 Widget.example.com "w1" is invalid: spec.size: Invalid value: 11: must be at most 10
}

// A defaulting webhook: the function sets fields on the object, and ctrl
// answers with a JSON patch of the changes.
func ExampleMutate() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeDynamic: newWidgetFake()})
	if err != nil {
		panic(err)
	}
	err = ctrl.Mutate(mgr, func(ctx context.Context, w *Widget) error {
		if w.Spec.Size == 0 {
			w.Spec.Size = 1
		}
		if w.Labels["tier"] == "" {
			metav1.SetMetaDataLabel(&w.ObjectMeta, "tier", "standard")
		}
		return nil
	})
	if err != nil {
		panic(err)
	}

	srv := httptest.NewServer(mgr.WebhookHandler())
	defer srv.Close()
	w := &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "w1"}}
	resp := admit(srv.URL+"/mutate-example-com-v1-widget", admissionv1.Create, w)
	fmt.Println(resp.Allowed, *resp.PatchType)
	fmt.Println(string(resp.Patch))
	// Output:
	// true JSONPatch
	// [{"op":"add","path":"/metadata/labels","value":{"tier":"standard"}},{"op":"replace","path":"/spec/size","value":1}]
}

// WidgetV1alpha1 is the first version of Widget, whose spec.size was called
// spec.count. Both Go types are registered, as two versions of one
// resource.
type WidgetV1alpha1 struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Count int `json:"count"`
	} `json:"spec,omitempty"`
}

func (w *WidgetV1alpha1) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func init() {
	err := ctrl.Register[*WidgetV1alpha1](ctrl.APIResource{Group: "example.com", Version: "v1alpha1", Resource: "widgets", Kind: "Widget", Namespaced: true})
	if err != nil {
		panic(err)
	}
}

// A conversion webhook between two versions of Widget: typed functions in
// both directions, no Scheme. The destination starts with the source's
// metadata.
func ExampleConvert() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeDynamic: newWidgetFake()})
	if err != nil {
		panic(err)
	}
	err = ctrl.Convert(mgr,
		func(ctx context.Context, src *WidgetV1alpha1, dst *Widget) error {
			dst.Spec.Size = src.Spec.Count
			return nil
		},
		func(ctx context.Context, src *Widget, dst *WidgetV1alpha1) error {
			dst.Spec.Count = src.Spec.Size
			return nil
		})
	if err != nil {
		panic(err)
	}

	srv := httptest.NewServer(mgr.WebhookHandler())
	defer srv.Close()
	old := `{"apiVersion":"example.com/v1alpha1","kind":"Widget","metadata":{"name":"w1","namespace":"default","uid":"1"},"spec":{"count":3}}`
	review := fmt.Sprintf(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview",
		"request":{"uid":"r1","desiredAPIVersion":"example.com/v1","objects":[%s]}}`, old)
	resp, err := http.Post(srv.URL+"/convert", "application/json", bytes.NewBufferString(review))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var out struct {
		Response struct {
			ConvertedObjects []json.RawMessage
			Result           metav1.Status
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		panic(err)
	}
	fmt.Println(out.Response.Result.Status)
	fmt.Println(string(out.Response.ConvertedObjects[0]))
	// Output:
	// Success
	// {"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w1","namespace":"default","uid":"1"},"spec":{"size":3},"status":{}}
}

// The configuration objects that make the API server call the webhooks:
// here for a test, at a URL on loopback; in a cluster, through a Service.
func ExampleManager_WebhookConfigurations() {
	mgr, err := ctrl.NewManager(ctrl.Options{FakeDynamic: newWidgetFake()})
	if err != nil {
		panic(err)
	}
	validate := func(ctx context.Context, w *Widget) error { return nil }
	if err := ctrl.Validate(mgr, ctrl.Validator[*Widget]{Create: validate}); err != nil {
		panic(err)
	}
	if err := ctrl.Mutate(mgr, validate); err != nil {
		panic(err)
	}
	err = ctrl.Convert(mgr, func(context.Context, *WidgetV1alpha1, *Widget) error { return nil }, func(context.Context, *Widget, *WidgetV1alpha1) error { return nil })
	if err != nil {
		panic(err)
	}

	configs, err := mgr.WebhookConfigurations("widget-webhooks", ctrl.WebhookTarget{URL: "https://127.0.0.1:9443"})
	if err != nil {
		panic(err)
	}
	for _, h := range configs.Validating.Webhooks {
		fmt.Println("validating", h.Name, h.Rules[0].Operations, *h.ClientConfig.URL)
	}
	for _, h := range configs.Mutating.Webhooks {
		fmt.Println("mutating", h.Name, h.Rules[0].Operations, *h.ClientConfig.URL)
	}
	conversion, _ := json.Marshal(configs.Conversions["widgets.example.com"])
	fmt.Println("conversion", string(conversion))

	configs, err = mgr.WebhookConfigurations("widget-webhooks", ctrl.WebhookTarget{
		Service: &admissionregistrationv1.ServiceReference{Namespace: "widgets", Name: "widget-webhooks"},
	})
	if err != nil {
		panic(err)
	}
	svc := configs.Validating.Webhooks[0].ClientConfig.Service
	fmt.Println("in a cluster:", svc.Namespace, svc.Name, *svc.Path)
	// Output:
	// validating v1.widgets.example.com [CREATE] https://127.0.0.1:9443/validate-example-com-v1-widget
	// mutating v1.widgets.example.com [CREATE UPDATE] https://127.0.0.1:9443/mutate-example-com-v1-widget
	// conversion {"strategy":"Webhook","webhook":{"clientConfig":{"url":"https://127.0.0.1:9443/convert"},"conversionReviewVersions":["v1"]}}
	// in a cluster: widgets widget-webhooks /validate-example-com-v1-widget
}

// admit sends an AdmissionReview of obj to url, as the API server does,
// and returns the response.
func admit(url string, op admissionv1.Operation, obj runtime.Object) *admissionv1.AdmissionResponse {
	raw, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	req := &admissionv1.AdmissionRequest{
		UID:       "1",
		Kind:      metav1.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"},
		Operation: op,
		Object:    runtime.RawExtension{Raw: raw},
	}
	if m, ok := obj.(metav1.Object); ok {
		req.Namespace, req.Name = m.GetNamespace(), m.GetName()
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
	if err != nil {
		panic(err)
	}
	resp, err := http.Post(url+"?timeout="+strconv.Itoa(10)+"s", "application/json", bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
		panic(err)
	}
	return review.Response
}
