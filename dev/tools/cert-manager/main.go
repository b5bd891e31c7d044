// Command cert-manager is a thin main over the github.com/cert-manager/cert-manager Go
// module, for the local control plane of crd-migrator's tests and `cluster --cert-manager`.
// It runs, in one process, the parts of cert-manager that issue and inject certificates:
//
//   - the controller with the certificates controllers (trigger, key manager, request
//     manager, issuing, readiness, revision manager), the CertificateRequest approver and
//     its SelfSigned and CA signers, and the Issuer and ClusterIssuer controllers — what
//     upstream's cmd/controller runs, through the same registry (controller.Known()), minus
//     ACME, Vault, Venafi, the ingress/gateway shims and the CertificateSigningRequest
//     signers;
//   - the cainjector (pkg/controller/cainjector), injecting a CA into
//     Validating/MutatingWebhookConfigurations, APIServices and CRDs annotated with
//     cert-manager.io/inject-ca-from (or inject-ca-from-secret).
//
// Upstream's own mains live in separate modules (controller-binary, cainjector-binary) that
// the module proxy here does not serve; their wiring (cmd/controller/app/controller.go and
// cmd/cainjector/app/controller.go, v1.21) is reproduced below without leader election,
// metrics or profiling. Everything used is outside the module's internal/ tree.
//
// Not a Go module of its own in the repository: scripts/build-tools.sh copies this file into
// a generated module requiring github.com/cert-manager/cert-manager at CERT_MANAGER_VERSION
// and builds it into the cache (so upstream's go.mod decides every dependency version).
//
// Usage: cert-manager --kubeconfig FILE [--readyz-address 127.0.0.1:PORT] [--v 2] ...
// GET /readyz on the readyz address answers 200 once the controller's informers and the
// cainjector's cache have synced. SIGTERM or SIGINT stops it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	// Issuer implementations the Issuer/ClusterIssuer controllers set up (they register
	// themselves with pkg/issuer's factory).
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The controllers run by default (names from the packages imported above, which register
// themselves with controller.Register when imported).
var defaultControllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	approver.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	trigger.ControllerName,
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

type options struct {
	kubeconfig               string
	readyzAddress            string
	controllers              string
	clusterResourceNamespace string
	workers                  int
	cainjector               bool
	crBackoffMin             time.Duration
	crBackoffMax             time.Duration
}

func main() {
	var o options
	// Not flag.CommandLine: controller-runtime registers its own --kubeconfig there.
	fs := flag.NewFlagSet("cert-manager", flag.ExitOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (required)")
	fs.StringVar(&o.readyzAddress, "readyz-address", "", "serve /readyz and /healthz on this host:port (none when empty)")
	fs.StringVar(&o.controllers, "controllers", strings.Join(defaultControllers, ","), "controllers to run (comma-separated; empty: none)")
	fs.StringVar(&o.clusterResourceNamespace, "cluster-resource-namespace", "kube-system", "namespace of the Secrets ClusterIssuers refer to")
	fs.IntVar(&o.workers, "concurrent-workers", 5, "workers per controller")
	fs.BoolVar(&o.cainjector, "cainjector", true, "also run the cainjector")
	fs.DurationVar(&o.crBackoffMin, "certificate-request-minimum-backoff-duration", time.Hour, "first delay before a failed issuance is retried")
	fs.DurationVar(&o.crBackoffMax, "certificate-request-maximum-backoff-duration", 32*time.Hour, "longest delay before a failed issuance is retried")
	klog.InitFlags(fs) // --v etc.
	_ = fs.Parse(os.Args[1:])
	if o.kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "cert-manager: --kubeconfig is required")
		os.Exit(2)
	}

	logf.InitLogs()
	defer logf.FlushLogs()
	ctrl.SetLogger(logf.Log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(logf.NewContext(ctx, logf.Log), o); err != nil {
		logf.Log.Error(err, "cert-manager failed")
		logf.FlushLogs()
		os.Exit(1)
	}
	logf.Log.Info("stopped")
}

func run(ctx context.Context, o options) error {
	log := logf.FromContext(ctx)
	g, ctx := errgroup.WithContext(ctx)

	var controllerReady, injectorReady atomic.Bool
	injectorReady.Store(!o.cainjector)
	if o.readyzAddress != "" {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.readyzAddress)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", o.readyzAddress, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if controllerReady.Load() && injectorReady.Load() {
				_, _ = w.Write([]byte("ok"))
				return
			}
			http.Error(w, fmt.Sprintf("controller synced: %t, cainjector synced: %t", controllerReady.Load(), injectorReady.Load()), http.StatusServiceUnavailable)
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error {
			<-ctx.Done()
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(shutdownCtx) //nolint:contextcheck
		})
		g.Go(func() error {
			log.Info("serving /readyz", "address", ln.Addr().String())
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}

	if err := startController(ctx, g, o, &controllerReady); err != nil {
		return err
	}
	if o.cainjector {
		if err := startCAInjector(ctx, g, o, &injectorReady); err != nil {
			return err
		}
	}
	return g.Wait()
}

// startController: cmd/controller/app/controller.go's Run, without leader election,
// metrics, profiling and the ACME DNS resolver.
func startController(ctx context.Context, g *errgroup.Group, o options, ready *atomic.Bool) error {
	log := logf.FromContext(ctx, "controller")
	enabled := []string{}
	for n := range strings.SplitSeq(o.controllers, ",") {
		if n = strings.TrimSpace(n); n != "" {
			enabled = append(enabled, n)
		}
	}
	known := controller.Known()
	for _, n := range enabled {
		if _, ok := known[n]; !ok {
			return fmt.Errorf("unknown controller %q (this build has: %s)", n, strings.Join(slices.Sorted(func(yield func(string) bool) {
				for k := range known {
					if !yield(k) {
						return
					}
				}
			}), ", "))
		}
	}
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         o.kubeconfig,
		KubernetesAPIQPS:   50,
		KubernetesAPIBurst: 100,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: o.clusterResourceNamespace},
		CertificateOptions: controller.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: o.crBackoffMin,
			CertificateRequestMaximumBackoffDuration: o.crBackoffMax,
		},
	})
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}
	log.Info("starting cert-manager controller", "version", util.VersionInfo().GitVersion, "controllers", enabled)
	for _, n := range enabled {
		iface, err := known[n](factory)
		if err != nil {
			return fmt.Errorf("error starting controller %s: %w", n, err)
		}
		g.Go(func() error {
			log.V(logf.InfoLevel).Info("starting controller", "controller", n)
			return iface.Run(o.workers, ctx)
		})
	}
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	g.Go(func() error {
		for name, synced := range base.SharedInformerFactory.WaitForCacheSync(ctx.Done()) {
			if !synced {
				return fmt.Errorf("informer for %v did not sync", name)
			}
		}
		for name, synced := range base.KubeSharedInformerFactory.WaitForCacheSync(ctx.Done()) {
			if !synced {
				return fmt.Errorf("informer for %v did not sync", name)
			}
		}
		log.Info("informers synced")
		ready.Store(true)
		<-ctx.Done()
		base.HTTP01ResourceMetadataInformersFactory.Shutdown()
		base.KubeSharedInformerFactory.Shutdown()
		base.SharedInformerFactory.Shutdown()
		return nil
	})
	return nil
}

// startCAInjector: cmd/cainjector/app/controller.go's Run with its defaults (every
// injectable kind, the Certificate data source), without leader election and metrics.
func startCAInjector(ctx context.Context, g *errgroup.Group, o options, ready *atomic.Bool) error {
	log := logf.FromContext(ctx, "cainjector")
	restConfig, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("cainjector: %w", err)
	}
	restConfig = util.RestConfigWithUserAgent(restConfig, "cainjector")
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		Cache:  cache.Options{ReaderFailOnMissingInformer: true},
		// Secrets are read directly, as upstream does (no cache of every Secret).
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		return fmt.Errorf("cainjector: creating the manager: %w", err)
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	})
	if err != nil {
		return fmt.Errorf("cainjector: registering the injectors: %w", err)
	}
	log.Info("starting cainjector")
	g.Go(func() error {
		if err := mgr.Start(ctx); err != nil {
			return fmt.Errorf("cainjector: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil // stopped before the cache synced; mgr.Start reports any error
		}
		log.Info("cache synced")
		ready.Store(true)
		return nil
	})
	return nil
}
