/**
 * A node agent for the local control plane: kwok-like, but the pods' containers really
 * run, as processes of this machine, without a container runtime.
 *
 *   const agent = await NodeAgent.start({ kubeconfig: cp.kubeconfigPath })   // in a harness netns
 *   // Deployments, ReplicaSets (kube-controller-manager) make pods; the agent binds them to
 *   // its Node, runs them, reports their status; the API server reaches the pod IPs.
 *   await agent.stop()
 *
 * It must run inside a network namespace of the harness (`await runInNetworkNamespace()`,
 * dev/controlplane/netns.ts): the pods' addresses and namespaces exist only in there.
 * Start-up: the pod bridge (network.ts), the API server forwarder for pods on the node's
 * address port 443 (api-proxy.ts), the Node and its heartbeat (node.ts), then two watches:
 * Pending pods without a nodeName (there is no scheduler: the agent binds each one whose
 * nodeSelector its Node matches and whose schedulerName is default-scheduler or unset) and
 * the pods bound to its Node (a {@link PodWorker} each: pod-worker.ts). A pod deleted in the
 * API is stopped within its grace period and then deleted for good.
 *
 * {@link NodeAgent.stop} stops every pod (SIGTERM, SIGKILL after the grace period, capped
 * by `shutdownGraceSeconds`), marks the Node NotReady, removes the bridge, the pod
 * namespaces and the pods' directories; the pod objects stay. Should the agent die
 * instead, process.ts's exit hooks and each pod's guard (sandbox.ts) clean up.
 *
 * The agent acts with the kubeconfig's identity (the harness's admin: there is no Node
 * authorizer or NodeRestriction here).
 */
import { readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { KubeHttp } from '../../src/kube/http.js'
import { loadKubeConfig } from '../../src/kube/client.js'
import { isConflict, isNotFound } from '../../src/kube/api-errors.js'
import { listAndWatch } from '../../src/kube/watch.js'
import { ApiServerForwarder, type ApiServerForPods } from './api-proxy.js'
import type { ImageSources } from './image.js'
import { describeError, podKey, type Pod } from './kube.js'
import { PodNetwork } from './network.js'
import { NodeRegistration } from './node.js'
import { PodWorker, type AgentContext } from './pod-worker.js'

export interface NodeAgentOptions {
  /** The agent's credentials (and the API server it talks to). */
  kubeconfig: string
  /** Default `crdm-node-<pid>`. */
  nodeName?: string
  /** Default 10.244.0.0/24 (network.ts). */
  podCIDR?: string
  /** Default crdmbr0. */
  bridge?: string
  /** Bind Pending pods without a nodeName to this node; default true. */
  bindUnscheduled?: boolean
  /** Restart back-off (pod-worker.ts); default the kubelet's 10 s to 300 s. */
  backoff?: { initialMs: number; maxMs: number }
  /** Share of a projected token's lifetime after which it is requested again; default 0.8. */
  tokenRefreshFraction?: number
  /** How often Secret, ConfigMap and downward API volumes are written again; default 60 s. */
  volumeResyncMs?: number
  /** Cap on each pod's grace period when the agent stops; default 10 s. */
  shutdownGraceSeconds?: number
  imageSources?: ImageSources
  /** Where each pod's directory (`crd-migrator-pod-<namespace>_<name>-XXXXXX`: volumes, logs, start scripts) is made; default the temp dir. */
  podsDir?: string
  log?: (msg: string) => void
}

export interface AgentPodInfo {
  namespace: string
  name: string
  uid: string
  podIP: string | undefined
}

export class NodeAgent {
  private readonly workers = new Map<string, PodWorker>()
  private readonly abort = new AbortController()
  private readonly binding = new Set<string>()
  private stopping: Promise<void> | undefined

  private constructor(
    readonly nodeName: string,
    readonly network: PodNetwork,
    readonly apiForPods: ApiServerForPods,
    private readonly http: KubeHttp,
    private readonly forwarder: ApiServerForwarder,
    private readonly node: NodeRegistration,
    private readonly ctx: AgentContext,
    private readonly opts: NodeAgentOptions,
  ) {}

  static async start(opts: NodeAgentOptions): Promise<NodeAgent> {
    const log = opts.log ?? (() => {})
    const context = loadKubeConfig(opts.kubeconfig)
    const http = new KubeHttp(context, { userAgent: 'crd-migrator-node-agent' })
    const caPem =
      context.cluster.certificateAuthorityData ??
      (context.cluster.certificateAuthority ? readFileSync(context.cluster.certificateAuthority, 'utf8') : undefined)
    if (!caPem) throw new Error(`${opts.kubeconfig}: the cluster has no certificate-authority; pods need it as ca.crt`)
    const nodeName = opts.nodeName ?? `crdm-node-${process.pid}`
    const network = new PodNetwork({ podCIDR: opts.podCIDR, bridge: opts.bridge })
    await network.setUp()
    const cleanup: Array<() => Promise<void>> = [() => network.tearDown()]
    try {
      const forwarder = new ApiServerForwarder(http.server, network.gateway)
      const apiForPods = await forwarder.start()
      cleanup.push(() => forwarder.stop())
      const node = new NodeRegistration({ http, name: nodeName, internalIP: network.gateway, podCIDR: network.podCIDR, log })
      await node.register()
      log(
        `node ${nodeName} registered: InternalIP ${network.gateway}, pods in ${network.podCIDR}, API server for pods ${apiForPods.host}:${apiForPods.port}`,
      )
      const ctx: AgentContext = {
        http,
        nodeName,
        network,
        api: apiForPods,
        caPem,
        podsDir: opts.podsDir ?? tmpdir(),
        imageSources: opts.imageSources ?? {},
        backoff: opts.backoff ?? { initialMs: 10_000, maxMs: 300_000 },
        tokenRefreshFraction: opts.tokenRefreshFraction ?? 0.8,
        volumeResyncMs: opts.volumeResyncMs ?? 60_000,
        nodeCapacity: node.capacity,
        event: (pod, type, reason, message) => void postEvent(http, nodeName, pod, type, reason, message),
        log,
      }
      const agent = new NodeAgent(nodeName, network, apiForPods, http, forwarder, node, ctx, opts)
      agent.watch()
      return agent
    } catch (err) {
      for (const c of cleanup.reverse()) await c().catch(() => {})
      throw err
    }
  }

  /** The pods this agent runs now. */
  pods(): AgentPodInfo[] {
    return [...this.workers.values()].map((w) => ({
      namespace: w.pod.metadata.namespace,
      name: w.pod.metadata.name,
      uid: w.pod.metadata.uid,
      podIP: w.podIP,
    }))
  }

  /** Last lines of a container's output (its log in the pod directory). */
  logs(namespace: string, name: string, container: string, lines = 20): string {
    return this.workers.get(`${namespace}/${name}`)?.logs(container, lines) ?? `(no pod ${namespace}/${name} on ${this.nodeName})`
  }

  private watch(): void {
    const signal = this.abort.signal
    const onError = (what: string) => (err: unknown) => this.ctx.log(`watch of ${what}: ${describeError(err)}`)
    void listAndWatch<Pod>(
      this.http,
      '/api/v1/pods',
      { onObject: (p) => this.onPod(p), onDeleted: (p) => this.onPodDeleted(p), onError: onError('its pods') },
      signal,
      { fieldSelector: `spec.nodeName=${this.nodeName}` },
    )
    if (this.opts.bindUnscheduled ?? true) {
      void listAndWatch<Pod>(
        this.http,
        '/api/v1/pods',
        { onObject: (p) => void this.bind(p), onError: onError('unscheduled pods') },
        signal,
        { fieldSelector: 'spec.nodeName=,status.phase=Pending' },
      )
    }
  }

  private async bind(pod: Pod): Promise<void> {
    const key = podKey(pod)
    if (this.stopping || pod.spec.nodeName || pod.metadata.deletionTimestamp || this.binding.has(key)) return
    if (pod.spec.schedulerName && pod.spec.schedulerName !== 'default-scheduler') return
    const labels = this.node.labels
    if (Object.entries(pod.spec.nodeSelector ?? {}).some(([k, v]) => labels[k] !== v)) return
    this.binding.add(key)
    try {
      await this.http.request({
        method: 'POST',
        path: `/api/v1/namespaces/${pod.metadata.namespace}/pods/${pod.metadata.name}/binding`,
        body: {
          apiVersion: 'v1',
          kind: 'Binding',
          metadata: { name: pod.metadata.name, uid: pod.metadata.uid },
          target: { apiVersion: 'v1', kind: 'Node', name: this.nodeName },
        },
      })
      this.ctx.log(`bound ${key} to ${this.nodeName}`)
      this.ctx.event(pod, 'Normal', 'Scheduled', `Successfully assigned ${key} to ${this.nodeName}`)
    } catch (err) {
      if (!isConflict(err) && !isNotFound(err)) this.ctx.log(`binding ${key}: ${describeError(err)}`)
    } finally {
      this.binding.delete(key)
    }
  }

  private onPod(pod: Pod): void {
    if (this.stopping) return
    const key = podKey(pod)
    const worker = this.workers.get(key)
    if (worker && worker.pod.metadata.uid !== pod.metadata.uid) {
      // The same name again, a new pod: the old one's worker is ending (its deletion was seen).
      void worker.terminate({ graceSeconds: 0, deleteFromApi: false })
      this.workers.delete(key)
      return this.onPod(pod)
    }
    if (worker) {
      worker.pod = { ...worker.pod, metadata: pod.metadata }
      if (pod.metadata.deletionTimestamp) void this.end(worker, { deleteFromApi: true })
      return
    }
    const phase = pod.status?.phase
    if (phase === 'Succeeded' || phase === 'Failed') return
    if (pod.metadata.deletionTimestamp) {
      // Nothing of it runs here (e.g. the agent restarted): delete it for good.
      void this.http
        .request({
          method: 'DELETE',
          path: `/api/v1/namespaces/${pod.metadata.namespace}/pods/${pod.metadata.name}`,
          body: { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 0, preconditions: { uid: pod.metadata.uid } },
        })
        .catch(() => {})
      return
    }
    const w = new PodWorker(pod, this.ctx)
    this.workers.set(key, w)
    this.ctx.log(`running ${key}`)
    w.start().catch((err: unknown) => {
      this.ctx.log(`pod ${key} failed to start: ${describeError(err)}`)
      this.ctx.event(pod, 'Warning', 'FailedCreatePodSandBox', describeError(err))
    })
  }

  private onPodDeleted(pod: Pod): void {
    const worker = this.workers.get(podKey(pod))
    if (worker && worker.pod.metadata.uid === pod.metadata.uid) void this.end(worker, { graceSeconds: 0, deleteFromApi: false })
  }

  private async end(worker: PodWorker, options: { graceSeconds?: number; deleteFromApi: boolean }): Promise<void> {
    await worker.terminate(options).catch((err: unknown) => this.ctx.log(`pod ${worker.key}: stopping failed: ${describeError(err)}`))
    if (this.workers.get(worker.key) === worker) this.workers.delete(worker.key)
  }

  /** Stop every pod, mark the Node NotReady, remove what the agent made (see the file comment). Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.abort.abort()
      const cap = this.opts.shutdownGraceSeconds ?? 10
      await Promise.all(
        [...this.workers.values()].map((w) =>
          this.end(w, { graceSeconds: Math.min(cap, w.pod.spec.terminationGracePeriodSeconds ?? 30), deleteFromApi: false }),
        ),
      )
      await this.node.stop()
      await this.forwarder.stop()
      await this.network.tearDown()
      this.http.close()
    })()
    return this.stopping
  }
}

/** A core/v1 Event about `pod` from this node (best effort). */
async function postEvent(http: KubeHttp, node: string, pod: Pod, type: string, reason: string, message: string): Promise<void> {
  const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z')
  const { namespace, name, uid } = pod.metadata
  await http
    .request({
      method: 'POST',
      path: `/api/v1/namespaces/${namespace}/events`,
      body: {
        apiVersion: 'v1',
        kind: 'Event',
        metadata: { generateName: `${name}.`, namespace },
        involvedObject: { apiVersion: 'v1', kind: 'Pod', namespace, name, uid },
        type,
        reason,
        message: message.slice(0, 1024),
        source: { component: 'kubelet', host: node },
        reportingComponent: 'kubelet',
        reportingInstance: node,
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
      },
    })
    .catch(() => {})
}
