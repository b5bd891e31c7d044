// Command tekton-conversion is Tekton Pipelines' own CRD conversion, for crd-migrator's tests
// of a real operator upgrade (test/integration/real-upgrades.test.ts). It serves, at
// /convert, the ConversionReviews of tasks, pipelines, taskruns and pipelineruns
// (tekton.dev) between v1beta1 and v1, through github.com/tektoncd/pipeline's
// pkg/apis/pipeline/v1beta1 and v1 types: their ConvertTo/ConvertFrom and SetDefaults.
//
// Tekton's webhook (cmd/webhook/main.go, v0.49) registers these kinds with knative.dev/pkg's
// conversion controller (webhook/resourcesemantics/conversion), hub v1beta1. That
// controller also reconciles the CRDs' caBundle through informers and a Secret, which a test
// does not need; the handler below is its HTTP handler (webhook/conversion.go) and its
// Convert and convert (resourcesemantics/conversion/conversion.go, knative.dev/pkg
// v0.0.0-20230221145627-8efb3485adcf, the version Tekton v0.49 requires) in the same order of
// operations: decode into the input version's zygote; the hub is the input, or
// hub.ConvertFrom(input); the output is the hub, or hub.ConvertTo(output); set the output's
// GroupVersionKind; SetDefaults when the output is Defaultable; marshal. The first object
// that fails fails the review. The context carries Tekton's configuration, as
// store.ToContext does with no ConfigMap loaded (config-defaults, feature-flags: their
// defaults).
//
// Not a Go module of its own in the repository: scripts/build-upgrades.sh copies this file
// into a generated module requiring github.com/tektoncd/pipeline at TEKTON_VERSION and builds
// it into the cache (so upstream's go.mod decides every dependency version).
//
// Usage: tekton-conversion --listen 127.0.0.1:PORT --cert FILE --key FILE
// It prints "listening on ADDRESS" on stderr once it accepts connections; GET /healthz
// answers 200. SIGTERM or SIGINT stops it.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	defaultconfig "github.com/tektoncd/pipeline/pkg/apis/config"
	v1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	apixv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/webhook/resourcesemantics/conversion"
)

type kindConversion struct {
	hubVersion string
	zygotes    map[string]conversion.ConvertibleObject
}

// As cmd/webhook/main.go's newConversionController (Tekton v0.49), the tekton.dev kinds.
var kinds = map[schema.GroupKind]kindConversion{
	v1.Kind("Task"): {hubVersion: "v1beta1", zygotes: map[string]conversion.ConvertibleObject{
		"v1beta1": &v1beta1.Task{}, "v1": &v1.Task{},
	}},
	v1.Kind("Pipeline"): {hubVersion: "v1beta1", zygotes: map[string]conversion.ConvertibleObject{
		"v1beta1": &v1beta1.Pipeline{}, "v1": &v1.Pipeline{},
	}},
	v1.Kind("TaskRun"): {hubVersion: "v1beta1", zygotes: map[string]conversion.ConvertibleObject{
		"v1beta1": &v1beta1.TaskRun{}, "v1": &v1.TaskRun{},
	}},
	v1.Kind("PipelineRun"): {hubVersion: "v1beta1", zygotes: map[string]conversion.ConvertibleObject{
		"v1beta1": &v1beta1.PipelineRun{}, "v1": &v1.PipelineRun{},
	}},
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9443", "address to serve HTTPS on")
	certFile := flag.String("cert", "", "serving certificate (PEM)")
	keyFile := flag.String("key", "", "serving key (PEM)")
	flag.Parse()
	if *certFile == "" || *keyFile == "" {
		fmt.Fprintln(os.Stderr, "usage: tekton-conversion --listen ADDR --cert FILE --key FILE")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var reviews atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/convert", func(w http.ResponseWriter, r *http.Request) {
		reviews.Add(1)
		var review apixv1.ConversionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprint("could not decode body:", err), http.StatusBadRequest)
			return
		}
		// withContext: Tekton's configuration (store.ToContext).
		rctx := defaultconfig.ToContext(r.Context(), defaultconfig.FromContextOrDefaults(r.Context()))
		rctx = apis.WithHTTPRequest(rctx, r)
		response := apixv1.ConversionReview{TypeMeta: review.TypeMeta, Response: convertReview(rctx, review.Request)}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(response); err != nil {
			http.Error(w, fmt.Sprint("could not encode response:", err), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "ok %d\n", reviews.Load())
	})
	serve(ctx, *listen, *certFile, *keyFile, mux)
}

// convertReview is knative's reconciler.Convert.
func convertReview(ctx context.Context, req *apixv1.ConversionRequest) *apixv1.ConversionResponse {
	res := &apixv1.ConversionResponse{UID: req.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	result := make([]runtime.RawExtension, 0, len(req.Objects))
	for _, obj := range req.Objects {
		converted, err := convert(ctx, obj, req.DesiredAPIVersion)
		if err != nil {
			fmt.Fprintf(os.Stderr, "conversion failed: %v\n", err)
			res.Result.Status = metav1.StatusFailure
			res.Result.Message = err.Error()
			break
		}
		result = append(result, converted)
	}
	res.ConvertedObjects = result
	return res
}

// convert is knative's reconciler.convert, step for step.
func convert(ctx context.Context, inRaw runtime.RawExtension, targetVersion string) (runtime.RawExtension, error) {
	var ret runtime.RawExtension
	var typeMeta metav1.TypeMeta
	if err := json.Unmarshal(inRaw.Raw, &typeMeta); err != nil {
		return ret, fmt.Errorf("error parsing type meta %q - %w", string(inRaw.Raw), err)
	}
	gv, err := schema.ParseGroupVersion(typeMeta.APIVersion)
	if err != nil {
		return ret, fmt.Errorf("error parsing GV %q: %w", typeMeta.APIVersion, err)
	}
	inGVK := gv.WithKind(typeMeta.Kind)
	if inGVK.Group == "" || inGVK.Version == "" || inGVK.Kind == "" {
		return ret, fmt.Errorf("invalid GroupVersionKind %v", inGVK)
	}
	conv, ok := kinds[inGVK.GroupKind()]
	if !ok {
		return ret, fmt.Errorf("no conversion support for type [kind=%s group=%s]", inGVK.Kind, inGVK.Group)
	}
	outGV, err := schema.ParseGroupVersion(targetVersion)
	if err != nil || outGV.Group == "" || outGV.Version == "" {
		return ret, fmt.Errorf("desired API version %q is not valid", targetVersion)
	}
	outGVK := outGV.WithKind(inGVK.Kind)

	inZygote, ok := conv.zygotes[inGVK.Version]
	if !ok {
		return ret, fmt.Errorf("conversion not supported for type %v", inGVK)
	}
	outZygote, ok := conv.zygotes[outGVK.Version]
	if !ok {
		return ret, fmt.Errorf("conversion not supported for type %v", outGVK)
	}
	hubZygote := conv.zygotes[conv.hubVersion]

	in := inZygote.DeepCopyObject().(conversion.ConvertibleObject)
	hub := hubZygote.DeepCopyObject().(conversion.ConvertibleObject)
	out := outZygote.DeepCopyObject().(conversion.ConvertibleObject)

	if err = json.Unmarshal(inRaw.Raw, &in); err != nil {
		return ret, fmt.Errorf("unable to unmarshal input: %w", err)
	}
	if inGVK.Version == conv.hubVersion {
		hub = in
	} else if err = hub.ConvertFrom(ctx, in); err != nil {
		return ret, fmt.Errorf("conversion failed to version %s for type %v -  %w", outGVK.Version, inGVK, err)
	}
	if outGVK.Version == conv.hubVersion {
		out = hub
	} else if err = hub.ConvertTo(ctx, out); err != nil {
		return ret, fmt.Errorf("conversion failed to version %s for type %v -  %w", outGVK.Version, inGVK, err)
	}
	out.GetObjectKind().SetGroupVersionKind(outGVK)
	if defaultable, ok := out.(apis.Defaultable); ok {
		defaultable.SetDefaults(ctx)
	}
	if ret.Raw, err = json.Marshal(out); err != nil {
		return ret, fmt.Errorf("unable to marshal output: %w", err)
	}
	return ret, nil
}

func serve(ctx context.Context, listen, certFile, keyFile string, mux http.Handler) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		fail("certificate", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fail("listen", err)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	fmt.Fprintf(os.Stderr, "listening on %s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fail("serve", err)
	}
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "tekton-conversion: %s: %v\n", what, err)
	os.Exit(1)
}
