/** A control plane this process started and owns: its etcd, API servers and controller manager, stopped and restarted at will. */
import { rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { type ControlPlaneBinaries } from './binaries.js'
import { etcdHealthy } from './etcd.js'
import { type CertKeyPair } from './pki.js'
import { releaseLoopbackAddresses } from './loopback.js'
import { currentNetworkNamespace } from './netns.js'
import { ManagedProcess, releaseDirAtExit, type Guard } from './process.js'
import type {
  FlagOverrides,
  ApiserverEndpoint,
  ControlPlaneState,
  StopOptions,
  StopApiserverOptions,
  StartApiserverOptions,
} from './types.js'
import { toArgs, merge, ControlPlaneBase } from './base.js'
import { waitFor } from '../wait.js'
import { type ControllerManagerSlot, httpsHealthy } from './controller-manager.js'

export interface OwnedLayout {
  dir: string
  runDir: string
  etcdDataDir: string
  certDir: string
  etcdLog: string
  caCertPath: string
  caKeyPath: string
  adminCertPath: string
  adminKeyPath: string
}

/** One kube-apiserver of an owned control plane. */
export interface ApiserverSlot {
  endpoint: ApiserverEndpoint
  /** In messages, and the stem of its log and pid files: `kube-apiserver` alone, `kube-apiserver-<i>` of several. */
  name: string
  /** Several servers: each runs in its own UTS namespace with this hostname (its identity lease is named after it). */
  hostname: string | undefined
  flags: Record<string, string>
  logFile: string
  pidFile: string
  overrides: FlagOverrides | undefined
  process: ManagedProcess | undefined
  /** When /readyz last answered 200 after a start (epoch ms). */
  readyAt: number | undefined
}

/** The `default/kubernetes` EndpointSlices: every API server (not on a loopback address) publishes itself there. */
export const KUBERNETES_ENDPOINTSLICES =
  '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes'

interface EndpointSliceList {
  items?: Array<{ endpoints?: Array<{ addresses?: string[] }>; ports?: Array<{ name?: string; port?: number }> }>
}

/** Addresses of the slices that serve `port` (the API servers' secure port), sorted. */
export function publishedAddresses(list: EndpointSliceList, port: number): string[] {
  const out = new Set<string>()
  for (const slice of list.items ?? []) {
    if (!(slice.ports ?? []).some((p) => p.port === port)) continue
    for (const e of slice.endpoints ?? []) for (const a of e.addresses ?? []) out.add(a)
  }
  return [...out].sort()
}

export class OwnedControlPlane extends ControlPlaneBase {
  readonly owned = true
  readonly networkNamespace = currentNetworkNamespace()
  private etcd: ManagedProcess | undefined
  private kcm: ControllerManagerSlot | undefined
  private stopped = false

  constructor(
    private readonly bins: ControlPlaneBinaries,
    private readonly layout: OwnedLayout,
    private readonly etcdFlags: Record<string, string>,
    private readonly slots: readonly ApiserverSlot[],
    /** Added to the network namespace's `lo` for several servers; removed on stop. */
    private readonly loopbackAddresses: readonly string[],
    etcdEndpoint: string,
    ca: CertKeyPair,
    admin: CertKeyPair,
    private readonly guard: Guard,
    private readonly readyTimeoutMs: number,
  ) {
    super(
      layout.dir,
      slots.map((s) => s.endpoint),
      etcdEndpoint,
      ca,
      admin,
      join(layout.dir, 'users'),
    )
    this.logFiles = { etcd: layout.etcdLog, apiserver: slots[0]!.logFile, apiservers: slots.map((s) => s.logFile) }
  }

  /** Start etcd and wait for /health. */
  async startEtcd(): Promise<void> {
    this.assertLive()
    if (this.etcd?.running) return
    this.etcd = ManagedProcess.start({
      name: 'etcd',
      command: this.bins.etcd,
      args: toArgs(this.etcdFlags),
      logFile: this.layout.etcdLog,
      pidFile: join(this.layout.runDir, 'etcd.pid'),
    })
    const etcd = this.etcd
    await waitFor(
      'etcd healthy',
      this.readyTimeoutMs,
      async () => {
        if (!etcd.running) throw this.startupError('etcd exited during startup', etcd)
        return (await etcdHealthy(this.etcdEndpoint, 1_000)) || undefined
      },
      { timedOut: () => this.startupError(`etcd not healthy after ${this.readyTimeoutMs}ms`, etcd) },
    )
  }

  async stopEtcd(opts: StopOptions = {}): Promise<void> {
    await this.etcd?.stop(opts.graceMs)
  }

  /** Before the first start: what to run (see {@link controllerManagerFlags}). */
  setControllerManager(slot: ControllerManagerSlot): void {
    this.kcm = slot
    this.logFiles = { ...this.logFiles!, controllerManager: slot.logFile }
  }

  async startControllerManager(): Promise<void> {
    this.assertLive()
    const kcm = this.kcm
    if (!kcm) throw new Error('this control plane was started without controllerManager: true')
    if (kcm.process?.running) return
    const command = this.bins.kubeControllerManager
    if (!command) {
      throw new Error(
        `kube-controller-manager is not in ${this.bins.binDir}; scripts/build-controlplane.sh builds it next to kube-apiserver`,
      )
    }
    kcm.process = ManagedProcess.start({
      name: 'kube-controller-manager',
      command,
      args: toArgs(kcm.flags),
      env: kcm.env,
      logFile: kcm.logFile,
      pidFile: kcm.pidFile,
    })
    const proc = kcm.process
    await waitFor(
      'kube-controller-manager healthy',
      this.readyTimeoutMs,
      async () => {
        if (!proc.running) throw this.startupError('kube-controller-manager exited during startup', proc)
        return (await httpsHealthy(`https://127.0.0.1:${kcm.port}/healthz`, 1_000)) || undefined
      },
      { timedOut: () => this.startupError(`kube-controller-manager not healthy after ${this.readyTimeoutMs}ms`, proc) },
    )
  }

  async stopControllerManager(opts: StopOptions = {}): Promise<void> {
    await this.kcm?.process?.stop(opts.graceMs)
  }

  async pauseControllerManager(): Promise<void> {
    this.assertLive()
    if (!this.kcm?.process?.running) throw new Error('kube-controller-manager is not running')
    this.kcm.process.pause()
  }

  async resumeControllerManager(): Promise<void> {
    this.assertLive()
    this.kcm?.process?.resume()
  }

  async startApiserver(opts: StartApiserverOptions = {}): Promise<void> {
    this.assertLive()
    const slots = this.select(opts.index).filter((s) => !s.process?.running)
    if (slots.length === 0) return
    for (const slot of slots) {
      if (opts.extraApiserverFlags) slot.overrides = opts.extraApiserverFlags
      this.spawnApiserver(slot)
    }
    const deadline = Date.now() + this.readyTimeoutMs
    // The first failure is reported; the other waits then end quietly.
    const failed = { value: false }
    await Promise.all(
      slots.map((s) =>
        this.waitReady(s, deadline, failed).catch((err: unknown) => {
          failed.value = true
          throw err
        }),
      ),
    )
    // Unless told not to publish themselves (`endpoint-reconciler-type: none`).
    const published = slots.filter((s) => merge(s.flags, s.overrides)['endpoint-reconciler-type'] !== 'none')
    if (this.slots.length > 1 && published.length > 0) await this.waitPublished(published, deadline)
  }

  async stopApiserver(opts: StopApiserverOptions = {}): Promise<void> {
    const slots = this.select(opts.index)
    await Promise.all(slots.map(async (s) => s.process?.stop(opts.graceMs)))
    // Pooled keep-alive connections went with it; the next request opens a fresh one.
    this.closeClients(slots.map((s) => s.endpoint.server))
  }

  async restartApiserver(opts: StartApiserverOptions = {}): Promise<void> {
    await this.stopApiserver(opts.index === undefined ? {} : { index: opts.index })
    await this.startApiserver(opts)
  }

  async pauseApiserver(index: number): Promise<void> {
    this.assertLive()
    const [slot] = this.select(index)
    if (!slot?.process?.running) throw new Error(`${slot?.name ?? index} is not running`)
    slot.process.pause()
  }

  async resumeApiserver(index: number): Promise<void> {
    this.assertLive()
    const [slot] = this.select(index)
    slot?.process?.resume()
  }

  /** Epoch ms at which each server last became ready, in index order. */
  apiserverReadyAt(): Array<number | undefined> {
    return this.slots.map((s) => s.readyAt)
  }

  /** The PKI is generated while etcd starts, so it arrives after construction. */
  setCredentials(ca: CertKeyPair, admin: CertKeyPair): void {
    this.ca = ca
    this.admin = admin
  }

  /** Stop every process, leave the temp dir and the loopback addresses alone. */
  async stopProcesses(): Promise<void> {
    await this.kcm?.process?.stop()
    await Promise.all(this.slots.map(async (s) => s.process?.stop()))
    await this.etcd?.stop()
  }

  /** Remove the addresses of several servers from the namespace's `lo` (at exit they go with the namespace). */
  async releaseAddresses(): Promise<void> {
    await releaseLoopbackAddresses(this.loopbackAddresses)
  }

  async writeStateFile(path: string): Promise<void> {
    const state: ControlPlaneState = {
      version: 1,
      server: this.server,
      kubeconfigPath: this.kubeconfigPath,
      apiservers: this.apiservers.map((a) => ({ ...a })),
      ...(this.networkNamespace ? { networkNamespace: this.networkNamespace } : {}),
      caCertPath: this.layout.caCertPath,
      caKeyPath: this.layout.caKeyPath,
      adminCertPath: this.layout.adminCertPath,
      adminKeyPath: this.layout.adminKeyPath,
      etcdEndpoint: this.etcdEndpoint,
      dir: this.dir,
      ownerPid: process.pid,
    }
    await writeFile(path, JSON.stringify(state, null, 2), { mode: 0o600 })
  }

  async stop(): Promise<void> {
    if (this.stopped) return
    this.stopped = true
    this.guard.disarm()
    this.closeClients()
    // API servers first so they do not spin on a vanished etcd.
    await this.stopProcesses()
    await this.releaseAddresses()
    await rm(this.dir, { recursive: true, force: true })
    releaseDirAtExit(this.dir)
  }

  /** Print the log tails to stderr and build the error to throw. */
  startupError(what: string, culprit: ManagedProcess): Error {
    const exit = culprit.exit
    const status = exit ? ` (exit ${exit.signal ?? exit.code})` : ''
    const parts = [`crd-migrator devenv: ${what}${status}`]
    // etcd and the culprit; when etcd is the culprit, etcd and every API server.
    const shown = culprit === this.etcd ? [this.etcd, ...this.slots.map((s) => s.process)] : [this.etcd, culprit]
    for (const p of shown) {
      if (!p) continue
      parts.push(`---- last 50 lines of ${p.name} log (${p.logFile}) ----`, p.tail(50))
    }
    process.stderr.write(`${parts.join('\n')}\n`)
    return new Error(`${what}${status}; the last lines of the etcd and kube-apiserver logs were printed to stderr`)
  }

  private select(index: number | undefined): ApiserverSlot[] {
    if (index === undefined) return [...this.slots]
    const slot = this.slots.find((s) => s.endpoint.index === index)
    if (!slot) throw new Error(`no API server ${index}: this control plane has ${this.slots.map((s) => s.endpoint.index).join(', ')}`)
    return [slot]
  }

  private spawnApiserver(slot: ApiserverSlot): void {
    const args = toArgs(merge(slot.flags, slot.overrides))
    slot.readyAt = undefined
    slot.process = ManagedProcess.start({
      name: slot.name,
      ...(slot.hostname === undefined
        ? { command: this.bins.kubeApiserver, args }
        : {
            // Own UTS namespace and hostname; `exec` keeps the pid, so signals reach kube-apiserver itself.
            command: 'unshare',
            args: ['--uts', 'sh', '-c', 'hostname "$1" && shift && exec "$@"', 'sh', slot.hostname, this.bins.kubeApiserver, ...args],
          }),
      logFile: slot.logFile,
      pidFile: slot.pidFile,
    })
  }

  private async waitReady(slot: ApiserverSlot, deadline: number, failed: { value: boolean }): Promise<void> {
    const proc = slot.process!
    let last = ''
    slot.readyAt = await waitFor(
      `${slot.name} ready`,
      deadline - Date.now(),
      async () => {
        this.assertLive()
        if (failed.value) throw new Error(`stopped waiting for ${slot.name}: another API server failed to start`)
        if (!proc.running) throw this.startupError(`${slot.name} exited during startup`, proc)
        try {
          const res = await this.apiRequest('/readyz', { apiserver: slot.endpoint.index, timeoutMs: 2_000 })
          if (res.status === 200) return Date.now()
          last = `HTTP ${res.status}: ${res.body.slice(0, 300)}`
        } catch (err) {
          last = (err as Error).message
        }
        return undefined
      },
      { timedOut: () => this.startupError(`${slot.name} not ready after ${this.readyTimeoutMs}ms (last /readyz: ${last})`, proc) },
    )
  }

  /**
   * Wait until the `default/kubernetes` EndpointSlice lists the servers (each publishes itself
   * when it starts, through the lease endpoint reconciler), asking the first of them.
   */
  private async waitPublished(slots: readonly ApiserverSlot[], deadline: number): Promise<void> {
    const port = Number(new URL(this.server).port)
    const want = slots.map((s) => s.endpoint.address)
    let listed: string[] = []
    await waitFor(
      'the default/kubernetes EndpointSlice to list the API servers',
      deadline - Date.now(),
      async () => {
        this.assertLive()
        try {
          const res = await this.apiRequest(KUBERNETES_ENDPOINTSLICES, { apiserver: slots[0]!.endpoint.index, timeoutMs: 2_000 })
          if (res.status === 200) listed = publishedAddresses(res.json as EndpointSliceList, port)
        } catch {
          // keep polling until the deadline
        }
        return want.every((a) => listed.includes(a)) || undefined
      },
      {
        timedOut: () =>
          new Error(
            `the default/kubernetes EndpointSlice does not list ${want.filter((a) => !listed.includes(a)).join(', ')} ` +
              `after ${this.readyTimeoutMs}ms (it lists: ${listed.join(', ') || 'nothing'})`,
          ),
      },
    )
  }

  private assertLive(): void {
    if (this.stopped) throw new Error('control plane was stopped')
  }
}
