/** What owned and attached control planes share: clients, users, etcd reads, and the small helpers of the harness. */
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { KubeConfig } from '@kubernetes/client-node'
import { KubeHttp } from '../../src/kube/http.js'
import { customResourceKey, etcdGet, etcdListKeys } from './etcd.js'
import { renderKubeconfig, writeKubeconfig } from './kubeconfig.js'
import { issueClientCert, type CertKeyPair } from './pki.js'
import type {
  FlagOverrides,
  UserCredentials,
  ApiResponse,
  ApiRequestOptions,
  ApiserverEndpoint,
  StopOptions,
  StopApiserverOptions,
  StartApiserverOptions,
  StartupTimings,
  LogFiles,
  ControlPlane,
} from './types.js'
export const ADMIN = { name: 'admin', groups: ['system:masters'] }

export function toArgs(flags: Record<string, string>): string[] {
  return Object.entries(flags).map(([k, v]) => `--${k}=${v}`)
}

export function merge(base: Record<string, string>, ...overrides: Array<FlagOverrides | undefined>): Record<string, string> {
  const out = { ...base }
  for (const o of overrides) {
    for (const [k, v] of Object.entries(o ?? {})) {
      const key = k.replace(/^--/, '')
      if (v === null) delete out[key]
      else out[key] = v
    }
  }
  return out
}

export function parseStoredApiVersion(key: string, raw: Buffer | null): string | null {
  if (raw === null) return null
  const text = raw.toString('utf8')
  if (!text.trimStart().startsWith('{')) {
    throw new Error(
      `etcd value at ${key} is not JSON (starts with ${JSON.stringify(text.slice(0, 8))}); only custom resources are stored as JSON`,
    )
  }
  const obj = JSON.parse(text) as { apiVersion?: unknown }
  return typeof obj.apiVersion === 'string' ? obj.apiVersion : null
}

export function safeFileName(s: string): string {
  return s.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 60)
}

/** Shared read-only behaviour of owned and attached control planes. */
export abstract class ControlPlaneBase implements ControlPlane {
  abstract readonly owned: boolean
  abstract readonly networkNamespace: string | undefined
  readonly adminUser = { name: ADMIN.name, groups: [...ADMIN.groups] }
  readonly server: string
  readonly kubeconfigPath: string
  timings: StartupTimings | undefined
  logFiles: LogFiles | undefined
  private userSeq = 0
  /** One client per API server and set of credentials (by certificate), made on first use. */
  private readonly clients = new Map<string, KubeHttp>()

  protected constructor(
    readonly dir: string,
    readonly apiservers: readonly ApiserverEndpoint[],
    readonly etcdEndpoint: string,
    protected ca: CertKeyPair,
    protected admin: CertKeyPair,
    protected readonly usersDir: string,
  ) {
    const first = apiservers[0]
    if (!first) throw new Error('a control plane has at least one API server')
    this.server = first.server
    this.kubeconfigPath = first.kubeconfigPath
  }

  get caPem(): string {
    return this.ca.certPem
  }

  async mintUser(name: string, groups: readonly string[] = []): Promise<UserCredentials> {
    const cert = await issueClientCert(this.ca, name, groups)
    await mkdir(this.usersDir, { recursive: true })
    const kubeconfigPath = join(this.usersDir, `${safeFileName(name)}-${++this.userSeq}.kubeconfig`)
    await writeKubeconfig(kubeconfigPath, { server: this.server, caPem: this.ca.certPem, user: name, ...cert })
    return { name, groups: [...groups], kubeconfigPath, certPem: cert.certPem, keyPem: cert.keyPem }
  }

  readEtcdKey(key: string): Promise<Buffer | null> {
    return etcdGet(this.etcdEndpoint, key)
  }

  async storedApiVersion(group: string, plural: string, namespace: string | undefined, name: string): Promise<string | null> {
    const key = customResourceKey(group, plural, namespace, name)
    return parseStoredApiVersion(key, await this.readEtcdKey(key))
  }

  listEtcdKeys(prefix: string): Promise<string[]> {
    return etcdListKeys(this.etcdEndpoint, prefix)
  }

  /**
   * Through the product's own client (KubeHttp, authenticated by client-node's KubeConfig
   * as the product is), answering every status instead of throwing on non-2xx.
   */
  async apiRequest(path: string, opts: ApiRequestOptions = {}): Promise<ApiResponse> {
    const target = this.apiserverAt(opts.apiserver ?? this.apiservers[0]!.index)
    const res = await this.clientFor(opts.as ?? this.admin, target).requestRaw({
      method: opts.method ?? 'GET',
      path,
      body: opts.body,
      ...(opts.contentType ? { contentType: opts.contentType } : {}),
      timeoutMs: opts.timeoutMs ?? 30_000,
    })
    let json: unknown
    try {
      json = JSON.parse(res.body)
    } catch {
      json = undefined
    }
    return { status: res.status, body: res.body, json }
  }

  protected apiserverAt(index: number): ApiserverEndpoint {
    const found = this.apiservers.find((a) => a.index === index)
    if (!found) {
      throw new Error(`no API server ${index}: this control plane has ${this.apiservers.map((a) => a.index).join(', ')}`)
    }
    return found
  }

  /** A KubeHttp for a client certificate of this control plane's CA, from an in-memory kubeconfig. */
  private clientFor(cred: { certPem: string; keyPem: string }, target: ApiserverEndpoint): KubeHttp {
    const key = `${target.server}\n${cred.certPem}`
    let http = this.clients.get(key)
    if (!http) {
      const kc = new KubeConfig()
      kc.loadFromString(renderKubeconfig({ server: target.server, caPem: this.ca.certPem, user: 'user', ...cred }))
      http = new KubeHttp(kc, { maxSockets: 16 })
      this.clients.set(key, http)
    }
    return http
  }

  /** Drops pooled connections, to the given servers or to all (after an API server stop, and on stop). */
  protected closeClients(servers?: readonly string[]): void {
    for (const [key, http] of this.clients) {
      if (servers && !servers.some((s) => key.startsWith(`${s}\n`))) continue
      http.close()
      this.clients.delete(key)
    }
  }

  abstract writeStateFile(path: string): Promise<void>
  abstract restartApiserver(opts?: StartApiserverOptions): Promise<void>
  abstract stopApiserver(opts?: StopApiserverOptions): Promise<void>
  abstract startApiserver(opts?: StartApiserverOptions): Promise<void>
  abstract pauseApiserver(index: number): Promise<void>
  abstract resumeApiserver(index: number): Promise<void>
  abstract stopEtcd(opts?: StopOptions): Promise<void>
  abstract startEtcd(): Promise<void>
  abstract stopControllerManager(opts?: StopOptions): Promise<void>
  abstract startControllerManager(): Promise<void>
  abstract pauseControllerManager(): Promise<void>
  abstract resumeControllerManager(): Promise<void>
  abstract stop(): Promise<void>
}
