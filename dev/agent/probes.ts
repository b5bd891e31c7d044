/**
 * Container probes, run by the agent from the harness namespace into the pod's IP (as the
 * kubelet does from the node): httpGet (HTTP or HTTPS, certificate not verified, 200-399
 * succeeds, User-Agent kube-probe), tcpSocket (a connection succeeds), exec (in the
 * container's namespaces, sandbox.ts; exit 0 succeeds); grpc is not supported (fails, says so).
 *
 * A {@link ProbeRunner} waits initialDelaySeconds, then probes every periodSeconds with
 * timeoutSeconds, and reports a change of its verdict once successThreshold successes or
 * failureThreshold failures in a row say so. Verdicts start as the kubelet's: a readiness
 * or startup probe failing, a liveness probe succeeding.
 */
import { request as httpRequest } from 'node:http'
import { request as httpsRequest } from 'node:https'
import { connect } from 'node:net'
import type { V1ContainerPort, V1Probe } from '@kubernetes/client-node'

export type ProbeKind = 'startup' | 'readiness' | 'liveness'

export interface ProbeTarget {
  podIP: string
  ports: V1ContainerPort[] | undefined
  exec(command: string[], timeoutMs: number): Promise<number>
}

export interface ProbeOutcome {
  ok: boolean
  message: string
}

/** A named or numbered port of the container. */
export function resolvePort(port: number | string, ports: V1ContainerPort[] | undefined): number {
  if (typeof port === 'number') return port
  if (/^\d+$/.test(port)) return Number(port)
  const found = ports?.find((p) => p.name === port)
  if (!found) throw new Error(`port ${JSON.stringify(port)} is not a named port of the container`)
  return found.containerPort
}

/** One probe, once. */
export async function probeOnce(probe: V1Probe, target: ProbeTarget): Promise<ProbeOutcome> {
  const timeoutMs = (probe.timeoutSeconds ?? 1) * 1000
  try {
    if (probe.httpGet) {
      const g = probe.httpGet
      const port = resolvePort(g.port, target.ports)
      const https = (g.scheme ?? 'HTTP').toUpperCase() === 'HTTPS'
      const headers: Record<string, string> = { 'User-Agent': 'kube-probe/crd-migrator-node-agent', Accept: '*/*' }
      for (const h of g.httpHeaders ?? []) headers[h.name] = h.value
      const status = await new Promise<number>((resolve, reject) => {
        const req = (https ? httpsRequest : httpRequest)(
          {
            host: g.host || target.podIP,
            port,
            path: g.path ?? '/',
            method: 'GET',
            headers,
            timeout: timeoutMs,
            rejectUnauthorized: false,
          },
          (res) => {
            res.resume()
            resolve(res.statusCode ?? 0)
          },
        )
        req.on('timeout', () => req.destroy(new Error(`timeout after ${timeoutMs}ms`)))
        req.on('error', reject)
        req.end()
      })
      const ok = status >= 200 && status < 400
      return { ok, message: ok ? `HTTP ${status}` : `HTTP probe failed with statuscode: ${status}` }
    }
    if (probe.tcpSocket) {
      const port = resolvePort(probe.tcpSocket.port, target.ports)
      await new Promise<void>((resolve, reject) => {
        const s = connect({ host: probe.tcpSocket!.host || target.podIP, port, timeout: timeoutMs })
        s.once('connect', () => {
          s.destroy()
          resolve()
        })
        s.once('timeout', () => s.destroy(new Error(`timeout after ${timeoutMs}ms`)))
        s.once('error', reject)
      })
      return { ok: true, message: 'connected' }
    }
    if (probe.exec) {
      const code = await target.exec(probe.exec.command ?? [], timeoutMs)
      return { ok: code === 0, message: code === -1 ? `command timed out after ${timeoutMs}ms` : `exit code ${code}` }
    }
    return {
      ok: false,
      message: `unsupported probe handler (${Object.keys(probe).join(', ')}): the node agent runs httpGet, tcpSocket and exec`,
    }
  } catch (err) {
    return { ok: false, message: (err as Error).message }
  }
}

export class ProbeRunner {
  /** The current verdict. */
  ok: boolean
  lastMessage = ''
  private timer: NodeJS.Timeout | undefined
  private successes = 0
  private failures = 0
  private stopped = false

  constructor(
    readonly kind: ProbeKind,
    private readonly probe: V1Probe,
    private readonly target: ProbeTarget,
    private readonly onChange: (ok: boolean, message: string) => void,
  ) {
    this.ok = kind === 'liveness'
  }

  start(): void {
    this.next((this.probe.initialDelaySeconds ?? 0) * 1000)
  }

  stop(): void {
    this.stopped = true
    clearTimeout(this.timer)
  }

  private next(delayMs: number): void {
    if (this.stopped) return
    this.timer = setTimeout(() => void this.tick(), delayMs)
    this.timer.unref()
  }

  private async tick(): Promise<void> {
    const outcome = await probeOnce(this.probe, this.target)
    if (this.stopped) return
    this.lastMessage = outcome.message
    if (outcome.ok) {
      this.successes++
      this.failures = 0
    } else {
      this.failures++
      this.successes = 0
    }
    const successThreshold = this.probe.successThreshold ?? 1
    const failureThreshold = this.probe.failureThreshold ?? 3
    if (!this.ok && outcome.ok && this.successes >= successThreshold) {
      this.ok = true
      this.onChange(true, outcome.message)
    } else if (this.ok && !outcome.ok && this.failures >= failureThreshold) {
      this.ok = false
      this.onChange(false, outcome.message)
    } else if (this.kind !== 'readiness' && !outcome.ok && this.failures >= failureThreshold) {
      // A startup probe that never succeeded: the container is killed all the same.
      this.onChange(false, outcome.message)
      this.failures = 0
    }
    // A startup probe is done once it succeeded.
    if (this.kind === 'startup' && this.ok) return
    this.next((this.probe.periodSeconds ?? 10) * 1000)
  }
}
