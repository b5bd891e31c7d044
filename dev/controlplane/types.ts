/** The control plane's public types: what a test or tool is handed, and the options to start one. */
import { type KubeRequest } from '../../src/kube/http.js'

/** Flag name (without leading dashes) -> value; `null` removes a default flag. */
export type FlagOverrides = Record<string, string | null>

export interface ControlPlaneOptions {
  /**
   * How many kube-apiservers share the etcd. Default 1: one server on 127.0.0.1. More than
   * one: only in a network namespace of the harness (see netns.ts: the start fails
   * elsewhere), server i on 198.18.R.i (a free /24 of 198.18.0.0/15 added to that
   * namespace's `lo`, which needs CAP_NET_ADMIN), all on one port, each in its own UTS
   * namespace (hostname `kube-apiserver-<i>`); ready once each answers /readyz and the
   * `default/kubernetes` EndpointSlice lists them all.
   */
  apiservers?: number
  /**
   * Also run kube-controller-manager with the garbage collector and the built-in storage
   * version migrator (KEP-4192), as user `system:kube-controller-manager` with one
   * ServiceAccount per controller (`--use-service-account-credentials`, as kubeadm runs it),
   * so the migrator's writes come from `system:serviceaccount:kube-system:storage-version-migrator-controller`.
   * Before Kubernetes 1.37 the feature gate and the `storagemigration.k8s.io/v1beta1` API are
   * switched on for it. Default off: most tests need no controllers.
   */
  controllerManager?: boolean
  /** Merged over the default kube-apiserver flags (of every server). */
  extraApiserverFlags?: FlagOverrides
  /** Merged over the default etcd flags. */
  extraEtcdFlags?: FlagOverrides
  /** How long to wait for etcd `/health` and then kube-apiserver `/readyz`. Default 60s. */
  readyTimeoutMs?: number
  /** Keep the temp dir (logs, data) when startup fails. Also: CRD_MIGRATOR_KEEP_FAILED=1. */
  keepDirOnFailure?: boolean
  /** Progress messages; default: silent. */
  log?: (msg: string) => void
}

export interface UserCredentials {
  name: string
  groups: string[]
  kubeconfigPath: string
  certPem: string
  keyPem: string
}

export interface ApiResponse {
  status: number
  body: string
  /** `body` parsed as JSON, when it is JSON. */
  json: unknown
}

export interface ApiRequestOptions {
  /** Index (1-based) of the API server to ask; default the first. */
  apiserver?: number
  method?: KubeRequest['method']
  body?: unknown
  contentType?: string
  /** Credentials to use instead of the admin's. */
  as?: { certPem: string; keyPem: string }
  timeoutMs?: number
}

/** One kube-apiserver of a control plane. */
export interface ApiserverEndpoint {
  /** 1-based; server i of several listens on 198.18.R.i and has hostname `kube-apiserver-<i>`. */
  index: number
  /** `https://<address>:<port>` (every server has the same port). */
  server: string
  /** The IP it binds to and advertises: 127.0.0.1 for a single server, else 198.18.R.<index>. */
  address: string
  /** Admin kubeconfig talking to this server only; the first server's is {@link ControlPlane.kubeconfigPath}. */
  kubeconfigPath: string
}

/** JSON written by {@link ControlPlane.writeStateFile}, read by {@link attachControlPlane}. */
export interface ControlPlaneState {
  version: 1
  server: string
  kubeconfigPath: string
  /** Every API server (absent in state files of older harnesses: then the one at `server`). */
  apiservers?: ApiserverEndpoint[]
  /** The harness network namespace it runs in (see {@link ControlPlane.networkNamespace}). */
  networkNamespace?: string
  caCertPath: string
  caKeyPath: string
  adminCertPath: string
  adminKeyPath: string
  etcdEndpoint: string
  dir: string
  ownerPid: number
}

export interface StopOptions {
  /** Time between SIGTERM and SIGKILL; 0 sends SIGKILL at once. Default 10s. */
  graceMs?: number
}

/** Which API server(s) to act on. */
export interface ApiserverSelector {
  /** 1-based index into {@link ControlPlane.apiservers}; default every server. */
  index?: number
}

export type StopApiserverOptions = StopOptions & ApiserverSelector

export interface StartApiserverOptions extends ApiserverSelector {
  /** Replaces the flag overrides of the selected server(s), kept for later restarts. */
  extraApiserverFlags?: FlagOverrides
}

export interface StartupTimings {
  /** Binaries located (or built). */
  binariesMs: number
  /** etcd healthy, measured from the start of startControlPlane. */
  etcdReadyMs: number
  /** Every kube-apiserver's /readyz OK (and, with several, all listed in the `default/kubernetes` EndpointSlice), from the start of startControlPlane. */
  readyMs: number
  /** With several servers: each server's /readyz OK, from the start of startControlPlane. */
  apiserverReadyMs?: number[]
}

export interface LogFiles {
  etcd: string
  apiserver: string
  apiservers: string[]
  /** Set when started with `controllerManager`. */
  controllerManager?: string
}

export interface ControlPlane {
  /** True when this process started (and will stop) the processes. */
  readonly owned: boolean
  readonly dir: string
  /** Admin kubeconfig (user `admin`, group `system:masters`) of the first API server. */
  readonly kubeconfigPath: string
  /** The first API server: `https://127.0.0.1:<port>`, or `https://198.18.R.1:<port>` with several. */
  readonly server: string
  /** Every API server, in index order (one entry unless started with `apiservers`). */
  readonly apiservers: readonly ApiserverEndpoint[]
  /**
   * The harness network namespace (netns.ts) its processes run in, and its addresses exist
   * in: always set with several API servers; undefined when started in the host's.
   */
  readonly networkNamespace: string | undefined
  readonly caPem: string
  readonly adminUser: { name: string; groups: string[] }
  /** `http://127.0.0.1:<port>` */
  readonly etcdEndpoint: string
  /** Only set on the owner. */
  readonly timings: StartupTimings | undefined
  /** Only set on the owner. `apiserver` is the first server's log, `apiservers` every server's in index order. */
  readonly logFiles: LogFiles | undefined

  /** A client certificate for `name` in `groups`, and a kubeconfig using it. */
  mintUser(name: string, groups?: readonly string[]): Promise<UserCredentials>
  /** Raw stored bytes of an etcd key, or null. */
  readEtcdKey(key: string): Promise<Buffer | null>
  /** apiVersion a custom resource is stored in (from etcd), or null when not stored. */
  storedApiVersion(group: string, plural: string, namespace: string | undefined, name: string): Promise<string | null>
  listEtcdKeys(prefix: string): Promise<string[]>
  /** A request to the (first, or `apiserver`) API server through KubeHttp, as admin unless `as` is given. Never throws on HTTP status. */
  apiRequest(path: string, opts?: ApiRequestOptions): Promise<ApiResponse>
  writeStateFile(path: string): Promise<void>

  /**
   * Owner only: stop kube-apiserver (SIGTERM) and start it again with the same (or overridden)
   * flags; waits for /readyz. Every server unless `index` is given.
   */
  restartApiserver(opts?: StartApiserverOptions): Promise<void>
  /** Owner only: SIGTERM, SIGKILL after `graceMs` (default 10s; 0 = SIGKILL at once). Every server unless `index` is given. */
  stopApiserver(opts?: StopApiserverOptions): Promise<void>
  /**
   * Owner only: start a stopped kube-apiserver and wait for /readyz (with several servers, also
   * until the `default/kubernetes` EndpointSlice lists it). Every stopped server unless `index` is given.
   */
  startApiserver(opts?: StartApiserverOptions): Promise<void>
  /**
   * Owner only: SIGSTOP API server `index` (1-based). It keeps its port, so connections are
   * accepted by the kernel, but nothing is answered (requests time out), like a hung server.
   */
  pauseApiserver(index: number): Promise<void>
  /** Owner only: SIGCONT API server `index` after {@link pauseApiserver}. */
  resumeApiserver(index: number): Promise<void>
  /** Owner only (started with `controllerManager`): stop kube-controller-manager (SIGTERM; `graceMs` as for the API server). */
  stopControllerManager(opts?: StopOptions): Promise<void>
  /** Owner only (started with `controllerManager`): start it again and wait for its /healthz. */
  startControllerManager(): Promise<void>
  /** Owner only: SIGSTOP kube-controller-manager, freezing whatever it is doing (a migration mid-run). */
  pauseControllerManager(): Promise<void>
  /** Owner only: SIGCONT it after {@link pauseControllerManager}. */
  resumeControllerManager(): Promise<void>
  /**
   * Owner only: stop etcd; the API server keeps running and its requests start failing.
   * A graceful etcd stop waits for the API server's watch streams (about 7s); pass
   * `{ graceMs: 0 }` to SIGKILL it at once (data written so far survives: no fsync is
   * needed for a process crash).
   */
  stopEtcd(opts?: StopOptions): Promise<void>
  /** Owner only: start etcd again on the same port and data dir, wait for /health. */
  startEtcd(): Promise<void>
  /** Owner: stop both processes and remove the temp dir. Attached: remove minted users' files. Idempotent. */
  stop(): Promise<void>
}
