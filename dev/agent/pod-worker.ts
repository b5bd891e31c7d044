/**
 * One pod on the node agent: its sandbox (network.ts, sandbox.ts), volumes (volumes.ts),
 * containers as processes with their probes (probes.ts), restarts, status (pod-status.ts)
 * and end.
 *
 * - Start: images resolved (image.ts; an unknown one leaves the container waiting with
 *   ErrImagePull and the reason), a network namespace with the pod IP, the pod directory,
 *   /etc/hosts, /etc/hostname and /etc/resolv.conf, the volumes (retried every 5 s while a
 *   Secret, ConfigMap or token is missing: ContainerCreating with the reason), then each
 *   container (its environment, env.ts; CreateContainerConfigError retried likewise).
 * - Restarts per restartPolicy (Always, OnFailure, Never), the kubelet's back-off: the
 *   first restart at once, then `backoff.initialMs` doubling to `backoff.maxMs`
 *   (CrashLoopBackOff meanwhile), forgotten after a run of 2 x maxMs. A liveness or startup
 *   probe that fails failureThreshold times stops the container (SIGTERM, then SIGKILL after
 *   the probe's or the pod's terminationGracePeriodSeconds), which then restarts as any exit.
 * - Readiness probe verdicts set the container's ready; the status is written (merge patch
 *   of pods/status) whenever it changes.
 * - End ({@link PodWorker.terminate}): probes stop, every process gets SIGTERM, SIGKILL
 *   after the grace period, the sandbox and network namespace go; for a pod deleted in the
 *   API the agent then deletes it for good (grace period 0, uid precondition), as the kubelet.
 */
import { mkdtemp } from 'node:fs/promises'
import { constants as osConstants } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { V1Container } from '@kubernetes/client-node'
import type { KubeHttp } from '../../src/kube/http.js'
import { ContentType } from '../../src/kube/http.js'
import { isNotFound } from '../../src/kube/api-errors.js'
import type { ApiServerForPods } from './api-proxy.js'
import { ContainerConfigError } from './env.js'
import { resolveImage, UnsupportedImageError, type ImageSources, type ImageSpec } from './image.js'
import { launchSpec, writePodFiles } from './launch.js'
import { describeError, podKey, type ContainerState, type Pod, type PodStatus } from './kube.js'
import type { PodNetwork, PodSandboxNetwork } from './network.js'
import { podStatus, statusFingerprint, type ContainerView } from './pod-status.js'
import { ProbeRunner } from './probes.js'
import { PodSandbox, type ContainerLaunch, type RunningContainer } from './sandbox.js'
import { PodVolumes, VolumeError } from './volumes.js'

export interface AgentContext {
  http: KubeHttp
  nodeName: string
  network: PodNetwork
  api: ApiServerForPods
  caPem: string
  /** Pod directories (one mkdtemp each, guarded on its own: sandbox.ts) go under it. */
  podsDir: string
  imageSources: ImageSources
  backoff: { initialMs: number; maxMs: number }
  tokenRefreshFraction: number
  volumeResyncMs: number
  nodeCapacity: { cpu: number; memory: number }
  event(pod: Pod, type: 'Normal' | 'Warning', reason: string, message: string): void
  log(msg: string): void
}

const RETRY_MS = 5000
const iso = (d = new Date()): string => d.toISOString().replace(/\.\d+Z$/, 'Z')

class Container {
  image: ImageSpec | undefined
  launch: ContainerLaunch | undefined
  running: RunningContainer | undefined
  probes: ProbeRunner[] = []
  restartCount = 0
  ready = false
  started = false
  state: ContainerState = { waiting: { reason: 'ContainerCreating' } }
  lastState: ContainerState = {}
  final = false
  backoffMs = 0
  containerID = ''
  stopping = false
  constructor(readonly spec: V1Container) {}
}

export class PodWorker {
  private readonly containers: Container[]
  private net: PodSandboxNetwork | undefined
  private sandbox: PodSandbox | undefined
  private volumes: PodVolumes | undefined
  private readonly startTime = iso()
  private written: PodStatus | undefined
  private writtenPrint = ''
  private writing: Promise<void> = Promise.resolve()
  private terminating: Promise<void> | undefined
  private reason: { reason: string; message: string } | undefined
  private gone = false
  private starting: Promise<void> | undefined
  /** Set at once by terminate(): nothing starts any more. */
  private ending = false
  readonly key: string

  constructor(
    public pod: Pod,
    private readonly ctx: AgentContext,
  ) {
    this.key = podKey(pod)
    this.containers = pod.spec.containers.map((c) => new Container(c))
  }

  get podIP(): string | undefined {
    return this.net?.ip
  }

  /** Last lines of a container's log. */
  logs(container: string, lines = 20): string {
    return this.sandbox?.logs(container, lines) ?? '(no sandbox)'
  }

  private log(msg: string): void {
    this.ctx.log(`pod ${this.key}: ${msg}`)
  }

  /** Start everything (see the file comment); resolves once the containers were started (or the pod cannot start). */
  start(): Promise<void> {
    this.starting ??= this.startInner()
    return this.starting
  }

  private async startInner(): Promise<void> {
    this.requestStatus()
    for (const c of this.containers) {
      try {
        c.image = resolveImage(c.spec.image ?? '', this.ctx.imageSources)
      } catch (err) {
        const message = describeError(err)
        c.state = { waiting: { reason: 'ErrImagePull', message } }
        if (err instanceof UnsupportedImageError) this.reason = { reason: 'UnsupportedImage', message }
        this.ctx.event(this.pod, 'Warning', 'Failed', `Failed to pull image "${c.spec.image}": ${message}`)
      }
    }
    if (this.containers.some((c) => !c.image)) return this.requestStatus()
    // The namespace's name is in the pod directory, and its guard runs, before it exists.
    this.net = this.ctx.network.reserve()
    const dir = await mkdtemp(
      join(this.ctx.podsDir, `crd-migrator-pod-${this.pod.metadata.namespace}_${this.pod.metadata.name.slice(0, 100)}-`),
    )
    this.sandbox = await PodSandbox.create(dir, this.net.netns, this.net.netnsPath)
    await this.ctx.network.createSandbox(this.net)
    await writePodFiles(dir, this.pod, this.net.ip, this.ctx.api)
    this.volumes = new PodVolumes({
      http: this.ctx.http,
      pod: this.pod,
      podDir: dir,
      caPem: this.ctx.caPem,
      tokenRefreshFraction: this.ctx.tokenRefreshFraction,
      resyncMs: this.ctx.volumeResyncMs,
      log: (m) => this.log(m),
    })
    this.log(`sandbox ${this.net.netns}, IP ${this.net.ip}`)
    this.requestStatus()
    for (;;) {
      if (this.ending) return
      try {
        await this.volumes.setUp()
        break
      } catch (err) {
        if (!(err instanceof VolumeError)) throw err
        this.setWaiting('ContainerCreating', err.message)
        this.ctx.event(this.pod, 'Warning', 'FailedMount', err.message)
        await sleep(RETRY_MS, undefined, { ref: false })
      }
    }
    for (const c of this.containers) await this.startContainer(c)
  }

  private setWaiting(reason: string, message: string): void {
    for (const c of this.containers) if (!c.running) c.state = { waiting: { reason, message } }
    this.requestStatus()
  }

  private async startContainer(c: Container): Promise<void> {
    if (this.ending) return
    const pod = this.pod
    const spec = c.spec
    for (;;) {
      try {
        c.launch = await this.launchSpec(c)
        break
      } catch (err) {
        if (!(err instanceof ContainerConfigError || err instanceof VolumeError)) throw err
        c.state = { waiting: { reason: 'CreateContainerConfigError', message: err.message } }
        this.requestStatus()
        await sleep(RETRY_MS, undefined, { ref: false })
        if (this.ending) return
      }
    }
    if (this.ending) return
    const running = await this.sandbox!.start(c.launch)
    c.running = running
    c.containerID = `crd-migrator-agent://${pod.metadata.uid}/${spec.name}/${c.restartCount}`
    c.state = { running: { startedAt: iso(running.startedAt) } }
    c.ready = false
    c.started = !spec.startupProbe
    c.stopping = false
    this.ctx.event(pod, 'Normal', 'Started', `Started container ${spec.name}`)
    this.startProbes(c)
    this.requestStatus()
    void running.process.exited.then((exit) => this.onExit(c, running, exit))
  }

  private launchSpec(c: Container): Promise<ContainerLaunch> {
    return launchSpec({
      pod: this.pod,
      container: c.spec,
      image: c.image!,
      podIP: this.net!.ip,
      podDir: this.sandbox!.dir,
      volumes: this.volumes!,
      ctx: this.ctx,
    })
  }

  private startProbes(c: Container): void {
    const target = {
      podIP: this.net!.ip,
      ports: c.spec.ports,
      exec: (cmd: string[], timeoutMs: number) => this.sandbox!.exec(c.spec.name, c.launch!, cmd, timeoutMs),
    }
    const readiness = c.spec.readinessProbe
      ? new ProbeRunner('readiness', c.spec.readinessProbe, target, (ok, message) => {
          c.ready = ok && c.started && !c.stopping
          if (!ok) this.ctx.event(this.pod, 'Warning', 'Unhealthy', `Readiness probe failed: ${message}`)
          this.requestStatus()
        })
      : undefined
    const liveness = c.spec.livenessProbe
      ? new ProbeRunner('liveness', c.spec.livenessProbe, target, (ok, message) => {
          if (!ok) this.probeKill(c, 'Liveness', message, c.spec.livenessProbe!.terminationGracePeriodSeconds)
        })
      : undefined
    const afterStart = (): void => {
      c.started = true
      if (!readiness) c.ready = true
      readiness?.start()
      liveness?.start()
      this.requestStatus()
    }
    c.probes = [readiness, liveness].filter((p): p is ProbeRunner => p !== undefined)
    if (c.spec.startupProbe) {
      const startup = new ProbeRunner('startup', c.spec.startupProbe, target, (ok, message) => {
        if (ok) afterStart()
        else this.probeKill(c, 'Startup', message, c.spec.startupProbe!.terminationGracePeriodSeconds)
      })
      c.probes.push(startup)
      startup.start()
    } else afterStart()
  }

  private probeKill(c: Container, kind: string, message: string, probeGrace: number | undefined): void {
    if (c.stopping || !c.running) return
    this.ctx.event(this.pod, 'Warning', 'Unhealthy', `${kind} probe failed: ${message}`)
    this.ctx.event(this.pod, 'Normal', 'Killing', `Container ${c.spec.name} failed ${kind.toLowerCase()} probe, will be restarted`)
    this.log(`${c.spec.name}: ${kind.toLowerCase()} probe failed (${message}), stopping it`)
    void this.stopContainer(c, (probeGrace ?? this.pod.spec.terminationGracePeriodSeconds ?? 30) * 1000)
  }

  private stopContainer(c: Container, graceMs: number): Promise<unknown> {
    c.stopping = true
    c.ready = false
    for (const p of c.probes) p.stop()
    this.requestStatus()
    return c.running?.process.stop(graceMs) ?? Promise.resolve()
  }

  private onExit(c: Container, running: RunningContainer, exit: { code: number | null; signal: NodeJS.Signals | null }): void {
    for (const p of c.probes) p.stop()
    c.running = undefined
    c.ready = false
    c.started = false
    const exitCode = exit.code ?? (exit.signal ? 128 + (signalNumber(exit.signal) ?? 0) : 1)
    const startError = !running.reachedExec()
    const terminated: NonNullable<ContainerState['terminated']> = {
      exitCode,
      ...(exit.signal ? { signal: signalNumber(exit.signal) ?? 0 } : {}),
      reason: startError ? 'StartError' : exitCode === 0 ? 'Completed' : 'Error',
      ...(startError ? { message: running.process.tail(5) } : {}),
      startedAt: iso(running.startedAt),
      finishedAt: iso(),
      containerID: c.containerID,
    }
    this.log(`${c.spec.name} exited (${terminated.reason}, code ${exitCode}${exit.signal ? `, ${exit.signal}` : ''})`)
    c.state = { terminated }
    if (this.ending) return this.requestStatus()
    const policy = this.pod.spec.restartPolicy ?? 'Always'
    if (policy === 'Never' || (policy === 'OnFailure' && exitCode === 0)) {
      c.final = true
      return this.requestStatus()
    }
    const ranMs = Date.now() - running.startedAt.getTime()
    if (ranMs > 2 * this.ctx.backoff.maxMs) c.backoffMs = 0
    const delay = c.backoffMs
    c.backoffMs = delay === 0 ? this.ctx.backoff.initialMs : Math.min(2 * delay, this.ctx.backoff.maxMs)
    if (delay > 0) {
      c.lastState = { terminated }
      c.state = {
        waiting: {
          reason: 'CrashLoopBackOff',
          message: `back-off ${Math.round(delay / 1000)}s restarting failed container=${c.spec.name} pod=${this.pod.metadata.name}_${this.pod.metadata.namespace}(${this.pod.metadata.uid})`,
        },
      }
      this.ctx.event(this.pod, 'Warning', 'BackOff', 'Back-off restarting failed container')
    }
    this.requestStatus()
    void sleep(delay, undefined, { ref: false }).then(async () => {
      if (this.ending) return
      c.lastState = { terminated }
      c.restartCount++
      await this.startContainer(c).catch((err: unknown) => this.log(`restarting ${c.spec.name} failed: ${describeError(err)}`))
    })
  }

  /** The pod's status now, written soon (at most one write at a time; unchanged statuses are not written). */
  requestStatus(): void {
    this.writing = this.writing
      .then(() => this.writeStatus())
      .catch((err: unknown) => this.log(`status write failed: ${describeError(err)}`))
  }

  /** Resolves once the status requested so far is written. */
  flushStatus(): Promise<void> {
    return this.writing
  }

  private view(): ContainerView[] {
    return this.containers.map((c) => ({
      name: c.spec.name,
      image: c.spec.image ?? '',
      imageID: c.image?.imageID ?? '',
      containerID: c.containerID,
      ready: c.ready && !!c.running,
      started: c.started && !!c.running,
      restartCount: c.restartCount,
      state: c.state,
      lastState: c.lastState,
      final: c.final,
    }))
  }

  private async writeStatus(): Promise<void> {
    if (this.gone) return
    const status = podStatus(
      {
        spec: this.pod.spec,
        podIP: this.net?.ip,
        hostIP: this.ctx.network.gateway,
        startTime: this.startTime,
        sandboxReady: !!this.sandbox,
        containers: this.view(),
        ...(this.reason ?? {}),
      },
      this.written,
    )
    const print = statusFingerprint(status)
    if (print === this.writtenPrint) return
    const { namespace, name } = this.pod.metadata
    try {
      await this.ctx.http.request({
        method: 'PATCH',
        path: `/api/v1/namespaces/${namespace}/pods/${name}/status`,
        contentType: ContentType.mergePatch,
        body: { metadata: { uid: this.pod.metadata.uid }, status },
      })
    } catch (err) {
      if (isNotFound(err)) {
        this.gone = true
        return
      }
      throw err
    }
    this.written = status
    this.writtenPrint = print
  }

  /**
   * Stop the pod (see the file comment). `graceSeconds` defaults to the pod's
   * deletionGracePeriodSeconds, else its terminationGracePeriodSeconds, else 30;
   * `deleteFromApi` removes the pod object at the end (a pod deleted through the API).
   */
  terminate(options: { graceSeconds?: number; deleteFromApi: boolean }): Promise<void> {
    this.ending = true
    this.terminating ??= (async () => {
      await this.starting?.catch(() => {})
      const grace =
        options.graceSeconds ?? this.pod.metadata.deletionGracePeriodSeconds ?? this.pod.spec.terminationGracePeriodSeconds ?? 30
      this.log(`terminating (grace ${grace}s)`)
      this.volumes?.stop()
      await Promise.all(this.containers.map((c) => this.stopContainer(c, grace * 1000)))
      await this.flushStatus()
      await this.sandbox?.destroy(0)
      if (this.net) await this.ctx.network.deleteSandbox(this.net)
      if (options.deleteFromApi && !this.gone) {
        const { namespace, name, uid } = this.pod.metadata
        await this.ctx.http
          .request({
            method: 'DELETE',
            path: `/api/v1/namespaces/${namespace}/pods/${name}`,
            body: { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 0, preconditions: { uid } },
          })
          .catch((err: unknown) => {
            if (!isNotFound(err)) this.log(`final delete failed: ${describeError(err)}`)
          })
      }
      this.gone = true
    })()
    return this.terminating
  }
}

function signalNumber(sig: NodeJS.Signals): number | undefined {
  return (osConstants.signals as Record<string, number | undefined>)[sig]
}
