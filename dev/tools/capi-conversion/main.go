// Command capi-conversion is Cluster API's own CRD conversion webhook for the core types,
// for crd-migrator's tests of a real operator upgrade (test/integration/real-upgrades.test.ts).
// It serves, at /convert, the ConversionReviews of clusters, machinedeployments, machinesets
// and machines (cluster.x-k8s.io) between v1beta1 and v1beta2, the hub, through
// sigs.k8s.io/cluster-api's api/core/v1beta1 and api/core/v1beta2 types and
// controller-runtime's conversion webhook handler: what CAPI's manager serves at /convert.
//
// v1beta2 references to providers' objects (ContractVersionedObjectReference) carry an API
// group, not a version; converting back to v1beta1 asks, through SetAPIVersionGetter, which
// apiVersion the provider's CRD declares for the contract. CAPI's main.go (v1.11,
// setupWebhooks) wires it to internal/contract.GetAPIVersion over the manager's client; that
// package is internal to the module, so its logic (the CRD named by
// util/contract.CalculateCRDName, its `cluster.x-k8s.io/<contract>` labels, the newest
// compatible contract first: v1beta2, then v1beta1) is reproduced below over a plain
// client, reading CRD metadata only (uncached, without client-side rate limit).
//
// Not a Go module of its own in the repository: scripts/build-upgrades.sh copies this file
// into a generated module requiring sigs.k8s.io/cluster-api at CAPI_VERSION and builds it
// into the cache (so upstream's go.mod decides every dependency version).
//
// Usage: capi-conversion --listen 127.0.0.1:PORT --cert FILE --key FILE --kubeconfig FILE
// It prints "listening on ADDRESS" on stderr once it accepts connections; GET /healthz
// answers 200. SIGTERM or SIGINT stops it.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	k8sversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/contract"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9443", "address to serve HTTPS on")
	certFile := flag.String("cert", "", "serving certificate (PEM)")
	keyFile := flag.String("key", "", "serving key (PEM)")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig to read providers' CRDs with (the apiVersion getter)")
	flag.Parse()
	if *certFile == "" || *keyFile == "" || *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "usage: capi-conversion --listen ADDR --cert FILE --key FILE --kubeconfig FILE")
		os.Exit(2)
	}

	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig", err)
	}
	// CAPI's manager reads the CRDs through its informer cache, so a conversion costs no
	// request; this client asks the API server each time, and client-go's default limit (5
	// requests/s) would make every object's conversion wait. No client-side limit.
	restConfig.QPS = -1
	crdScheme := runtime.NewScheme()
	utilruntime.Must(apiextensionsv1.AddToScheme(crdScheme))
	c, err := client.New(restConfig, client.Options{Scheme: crdScheme})
	if err != nil {
		fail("client", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// As CAPI v1.11's main.go (setupWebhooks) does for the core API group.
	apiVersionGetter := func(gk schema.GroupKind) (string, error) {
		return getAPIVersion(ctx, c, gk)
	}
	clusterv1beta1.SetAPIVersionGetter(apiVersionGetter)

	scheme := runtime.NewScheme()
	utilruntime.Must(clusterv1beta1.AddToScheme(scheme))
	utilruntime.Must(clusterv1.AddToScheme(scheme))

	var reviews atomic.Int64
	handler := conversion.NewWebhookHandler(scheme)
	mux := http.NewServeMux()
	mux.HandleFunc("/convert", func(w http.ResponseWriter, r *http.Request) {
		reviews.Add(1)
		handler.ServeHTTP(w, r)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "ok %d\n", reviews.Load())
	})
	serve(ctx, *listen, *certFile, *keyFile, mux)
}

// getAPIVersion is CAPI v1.11's internal/contract.GetAPIVersion for its contract, v1beta2.
func getAPIVersion(ctx context.Context, c client.Reader, gk schema.GroupKind) (string, error) {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetName(contract.CalculateCRDName(gk.Group, gk.Kind))
	meta.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := c.Get(ctx, client.ObjectKeyFromObject(meta), meta); err != nil {
		return "", fmt.Errorf("failed to get apiVersion for kind %s: failed to get CustomResourceDefinition metadata: %w", gk.Kind, err)
	}
	// GetCompatibleVersions("v1beta2"), newest first.
	for _, contractVersion := range []string{"v1beta2", "v1beta1"} {
		supported := meta.GetLabels()[clusterv1.GroupVersion.Group+"/"+contractVersion]
		if supported == "" {
			continue
		}
		versions := strings.Split(supported, "_")
		sort.Slice(versions, func(i, j int) bool {
			return k8sversion.CompareKubeAwareVersionStrings(versions[i], versions[j]) < 0
		})
		return schema.GroupVersion{Group: gk.Group, Version: versions[len(versions)-1]}.String(), nil
	}
	return "", fmt.Errorf("failed to get apiVersion for kind %s: cannot find any versions matching contract versions [v1beta2 v1beta1] for CRD %s as contract version label(s) are either missing or empty", gk.Kind, meta.GetName())
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
	fmt.Fprintf(os.Stderr, "capi-conversion: %s: %v\n", what, err)
	os.Exit(1)
}
