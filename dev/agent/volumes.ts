/**
 * A pod's volumes, materialised in directories of the agent (`<pod dir>/volumes/<name>`)
 * that sandbox.ts bind-mounts at each container's mountPaths:
 *
 * - secret, configMap, downwardAPI and projected (secret, configMap, downwardAPI and
 *   serviceAccountToken sources) through the atomic writer (atomic-writer.ts), read-only,
 *   kept current: every `resyncMs` (the kubelet's sync, about a minute) and whenever a token
 *   is due;
 * - serviceAccountToken: a TokenRequest for the pod's ServiceAccount with the source's
 *   audience and expirationSeconds, bound to the pod (so it dies with it), requested again
 *   once `tokenRefreshFraction` (0.8, as the kubelet) of its lifetime has passed (at most 24 h);
 * - emptyDir: an empty directory (0777; the fsGroup's with the setgid bit);
 * - the in-cluster credentials: unless automountServiceAccountToken is false (pod, else
 *   ServiceAccount), a projected volume like the ServiceAccount admission plugin's
 *   `kube-api-access-*` (a token of 3607 s for the API server's audiences, ca.crt, namespace)
 *   mounted at /var/run/secrets/kubernetes.io/serviceaccount in every container that has no
 *   mount there (the local control plane runs without that plugin).
 *
 * With fsGroup, files belong to root and that group. Other volume types are refused
 * ({@link VolumeError}: the pod stays ContainerCreating and says why).
 */
import { chmod, chown, mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import type { V1DownwardAPIVolumeFile, V1KeyToPath, V1Volume, V1VolumeMount } from '@kubernetes/client-node'
import type { KubeHttp } from '../../src/kube/http.js'
import { writeAtomically, type VolumeFile } from './atomic-writer.js'
import { getOptional, readKeyedData, type Pod } from './kube.js'
import { parseQuantity } from './env.js'

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount'
export const SERVICE_ACCOUNT_VOLUME = 'kube-api-access-node-agent'

export class VolumeError extends Error {}

export interface VolumeOptions {
  http: KubeHttp
  pod: Pod
  /** Volumes go to `<podDir>/volumes/<name>`. */
  podDir: string
  /** ca.crt of the in-cluster credentials: the CA of the API server's serving certificate. */
  caPem: string
  /** See the file comment; default 0.8. */
  tokenRefreshFraction?: number
  /** Default 60 s. */
  resyncMs?: number
  log: (msg: string) => void
}

interface Token {
  token: string
  refreshAt: number
}

export class PodVolumes {
  /** Volume name -> its host directory, once set up. */
  readonly dirs = new Map<string, string>()
  private volumes: V1Volume[] = []
  private readonly tokens = new Map<string, Token>()
  private timer: NodeJS.Timeout | undefined
  private stopped = false

  constructor(private readonly o: VolumeOptions) {}

  private get fsGroup(): number | undefined {
    return this.o.pod.spec.securityContext?.fsGroup
  }

  /** Whether the in-cluster credentials are mounted (after {@link setUp}). */
  get automount(): boolean {
    return this.volumes.some((v) => v.name === SERVICE_ACCOUNT_VOLUME)
  }

  /** The mounts of `container` plus the in-cluster credentials where they apply. */
  mountsOf(mounts: V1VolumeMount[] | undefined): V1VolumeMount[] {
    const all = [...(mounts ?? [])]
    if (this.automount && !all.some((m) => m.mountPath.replace(/\/+$/, '') === SERVICE_ACCOUNT_DIR)) {
      all.push({ name: SERVICE_ACCOUNT_VOLUME, mountPath: SERVICE_ACCOUNT_DIR, readOnly: true })
    }
    return all
  }

  /** Every volume written once; then kept current until {@link stop}. Throws {@link VolumeError}. */
  async setUp(): Promise<void> {
    const { pod } = this.o
    this.volumes = [...(pod.spec.volumes ?? [])]
    if (await this.wantsCredentials()) {
      this.volumes.push({
        name: SERVICE_ACCOUNT_VOLUME,
        projected: {
          defaultMode: 0o644,
          sources: [
            { serviceAccountToken: { path: 'token', expirationSeconds: 3607 } },
            { configMap: { name: '', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
            { downwardAPI: { items: [{ path: 'namespace', fieldRef: { fieldPath: 'metadata.namespace' } }] } },
          ],
        },
      })
    }
    await this.sync()
    this.schedule()
  }

  private async wantsCredentials(): Promise<boolean> {
    const { pod, http } = this.o
    if (pod.spec.automountServiceAccountToken !== undefined) return pod.spec.automountServiceAccountToken
    const sa = pod.spec.serviceAccountName ?? 'default'
    const obj = await getOptional<{ automountServiceAccountToken?: boolean }>(
      http,
      `/api/v1/namespaces/${pod.metadata.namespace}/serviceaccounts/${sa}`,
    )
    return obj?.automountServiceAccountToken !== false
  }

  /** Write every volume's current content (unchanged ones are left alone). */
  async sync(): Promise<void> {
    for (const v of this.volumes) {
      const dir = join(this.o.podDir, 'volumes', v.name)
      if (v.emptyDir) {
        if (!this.dirs.has(v.name)) {
          await mkdir(dir, { recursive: true })
          await chmod(dir, this.fsGroup === undefined ? 0o777 : 0o2777)
          if (this.fsGroup !== undefined) await chown(dir, 0, this.fsGroup)
        }
      } else {
        const files = await this.render(v)
        if (await writeAtomically(dir, files, this.fsGroup)) this.o.log(`volume ${v.name}: ${files.size} file(s) written`)
      }
      this.dirs.set(v.name, dir)
    }
  }

  private async render(v: V1Volume): Promise<Map<string, VolumeFile>> {
    const files = new Map<string, VolumeFile>()
    if (v.secret) {
      await this.keyed(files, 'Secret', v.secret.secretName ?? '', v.secret.items, v.secret.defaultMode, v.secret.optional)
    } else if (v.configMap) {
      await this.keyed(files, 'ConfigMap', v.configMap.name ?? '', v.configMap.items, v.configMap.defaultMode, v.configMap.optional)
    } else if (v.downwardAPI) {
      this.downward(files, v.downwardAPI.items ?? [], v.downwardAPI.defaultMode ?? 0o644)
    } else if (v.projected) {
      const mode = v.projected.defaultMode ?? 0o644
      for (const s of v.projected.sources ?? []) {
        if (s.secret) await this.keyed(files, 'Secret', s.secret.name ?? '', s.secret.items, mode, s.secret.optional)
        else if (s.configMap && v.name === SERVICE_ACCOUNT_VOLUME) files.set('ca.crt', { data: Buffer.from(this.o.caPem), mode })
        else if (s.configMap) await this.keyed(files, 'ConfigMap', s.configMap.name ?? '', s.configMap.items, mode, s.configMap.optional)
        else if (s.downwardAPI) this.downward(files, s.downwardAPI.items ?? [], mode)
        else if (s.serviceAccountToken) {
          const t = s.serviceAccountToken
          const token = await this.token(`${v.name}/${t.path}`, t.audience, t.expirationSeconds ?? 3600)
          files.set(t.path, { data: Buffer.from(token), mode })
        } else throw new VolumeError(`volume ${v.name}: unsupported projected source ${Object.keys(s).join(', ')}`)
      }
    } else {
      const kind = Object.keys(v).filter((k) => k !== 'name')
      throw new VolumeError(`volume ${v.name}: the node agent does not support ${kind.join(', ') || 'this volume type'}`)
    }
    return files
  }

  private async keyed(
    files: Map<string, VolumeFile>,
    kind: 'Secret' | 'ConfigMap',
    name: string,
    items: V1KeyToPath[] | undefined,
    defaultMode: number | undefined,
    optional: boolean | undefined,
  ): Promise<void> {
    const data = await readKeyedData(this.o.http, kind, this.o.pod.metadata.namespace, name)
    if (!data) {
      if (optional) return
      throw new VolumeError(`${kind.toLowerCase()} "${name}" not found`)
    }
    const mode = defaultMode ?? 0o644
    if (!items) {
      for (const [k, v] of data) files.set(k, { data: v, mode })
      return
    }
    for (const item of items) {
      const v = data.get(item.key)
      if (v === undefined) {
        if (optional) continue
        throw new VolumeError(`couldn't find key ${item.key} in ${kind} ${this.o.pod.metadata.namespace}/${name}`)
      }
      files.set(item.path, { data: v, mode: item.mode ?? mode })
    }
  }

  private downward(files: Map<string, VolumeFile>, items: V1DownwardAPIVolumeFile[], defaultMode: number): void {
    const { pod } = this.o
    const lines = (m: Record<string, string> | undefined): string =>
      Object.keys(m ?? {})
        .sort()
        .map((k) => `${k}=${JSON.stringify(m![k])}`)
        .join('\n')
    for (const item of items) {
      let value: string
      const path = item.fieldRef?.fieldPath
      const one = path ? /^metadata\.(labels|annotations)\['(.*)'\]$/.exec(path) : null
      if (one) value = (one[1] === 'labels' ? pod.metadata.labels : pod.metadata.annotations)?.[one[2]!] ?? ''
      else if (path === 'metadata.name') value = pod.metadata.name
      else if (path === 'metadata.namespace') value = pod.metadata.namespace
      else if (path === 'metadata.uid') value = pod.metadata.uid
      else if (path === 'metadata.labels') value = lines(pod.metadata.labels)
      else if (path === 'metadata.annotations') value = lines(pod.metadata.annotations)
      else if (item.resourceFieldRef) {
        const ref = item.resourceFieldRef
        const c = pod.spec.containers.find((x) => x.name === ref.containerName) ?? pod.spec.containers[0]
        const [kind, res] = ref.resource.split('.') as ['limits' | 'requests', string]
        const set = c?.resources?.[kind]?.[res]
        value = String(Math.ceil((set === undefined ? 0 : parseQuantity(set)) / (ref.divisor ? parseQuantity(ref.divisor) || 1 : 1)))
      } else throw new VolumeError(`downwardAPI: unsupported item ${JSON.stringify(item)}`)
      files.set(item.path, { data: Buffer.from(value), mode: item.mode ?? defaultMode })
    }
  }

  /** A bound token for the pod's ServiceAccount: the one we hold while it is fresh, else a new one. */
  private async token(key: string, audience: string | undefined, expirationSeconds: number): Promise<string> {
    const held = this.tokens.get(key)
    if (held && Date.now() < held.refreshAt) return held.token
    const { pod, http } = this.o
    const sa = pod.spec.serviceAccountName ?? 'default'
    const path = `/api/v1/namespaces/${pod.metadata.namespace}/serviceaccounts/${sa}/token`
    const issuedAt = Date.now()
    let res: { status?: { token?: string } }
    try {
      res = (
        await http.request<{ status?: { token?: string } }>({
          method: 'POST',
          path,
          body: {
            apiVersion: 'authentication.k8s.io/v1',
            kind: 'TokenRequest',
            spec: {
              ...(audience ? { audiences: [audience] } : {}),
              expirationSeconds,
              boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: pod.metadata.name, uid: pod.metadata.uid },
            },
          },
        })
      ).body
    } catch (err) {
      throw new VolumeError(`failed to fetch token for ServiceAccount ${pod.metadata.namespace}/${sa}: ${(err as Error).message}`)
    }
    const token = res.status?.token
    if (!token) throw new VolumeError(`TokenRequest for ${pod.metadata.namespace}/${sa} returned no token`)
    // As the kubelet: due once the fraction of the lifetime asked for has passed, at most 24 h.
    const lifetime = expirationSeconds * 1000
    const refreshAt = issuedAt + Math.min(lifetime * (this.o.tokenRefreshFraction ?? 0.8), 24 * 3600 * 1000)
    this.tokens.set(key, { token, refreshAt })
    this.o.log(
      `token ${key}: issued (audience ${audience ?? 'default'}, ${expirationSeconds}s), refresh in ${Math.round((refreshAt - issuedAt) / 1000)}s`,
    )
    return token
  }

  private schedule(failed = false): void {
    if (this.stopped) return
    const resync = Date.now() + (this.o.resyncMs ?? 60_000)
    const next = Math.min(resync, ...[...this.tokens.values()].map((t) => t.refreshAt))
    this.timer = setTimeout(
      () => {
        this.sync().then(
          () => this.schedule(),
          (err: unknown) => {
            this.o.log(`volume resync failed (again in 5 s): ${(err as Error).message}`)
            this.schedule(true)
          },
        )
      },
      failed ? 5000 : Math.max(250, next - Date.now()),
    )
    this.timer.unref()
  }

  stop(): void {
    this.stopped = true
    clearTimeout(this.timer)
  }
}
