/**
 * Real operator upgrades on the test control plane: Cluster API's and Tekton Pipelines' own
 * conversion webhooks (dev/tools/capi-conversion, dev/tools/tekton-conversion, built from
 * their Go modules by scripts/build-upgrades.sh) and the CRDs of their releases (taken from
 * the same modules), so a test can install an old release, create objects the way it
 * stores them, apply the next release (storage flips) and read every object from etcd.
 *
 * A webhook runs as a process of this test file, guarded like cert-manager's (killed at our
 * exit, and by a detached guard when this process dies), with a serving certificate from a
 * development CA (dev/certs); the CRDs point at it by URL (`https://127.0.0.1:<port>/convert`)
 * with that CA as their caBundle: the kube-apiserver of the local control plane reaches
 * 127.0.0.1.
 */
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import https from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseAllDocuments } from 'yaml'
import { generateDevCertificates } from '../../dev/certs/devcerts.js'
import { packageRoot } from '../../dev/controlplane/binaries.js'
import { runBuildScript } from '../../dev/controlplane/build-script.js'
import type { ControlPlane } from '../../dev/controlplane/controlplane.js'
import { freePorts } from '../../dev/controlplane/ports.js'
import { ManagedProcess, releaseDirAtExit, removeDirAtExit, startGuard } from '../../dev/controlplane/process.js'
import { poll, waitFor } from '../../dev/wait.js'

export type Obj = Record<string, unknown>

export interface CrdManifest extends Obj {
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> }
  spec: {
    group: string
    names: { plural: string; kind: string }
    versions: Array<{ name: string; served: boolean; storage: boolean } & Obj>
    conversion?: Obj
  } & Obj
}

export interface UpgradeTools {
  capiConversion: string
  tektonConversion: string
  /** Directory of the core CRDs (`<plural>.cluster.x-k8s.io.yaml`), by CAPI release (`v1.10.6`). */
  capiCrds: Record<string, string>
  /** Directory of the CRDs (`<plural>.tekton.dev.yaml`), by Tekton Pipelines release (`v0.48.0`). */
  tektonCrds: Record<string, string>
}

let pendingTools: Promise<UpgradeTools> | undefined

/** Paths printed by scripts/build-upgrades.sh (building on first use, under its lock). Memoized. */
export function ensureUpgradeTools(): Promise<UpgradeTools> {
  pendingTools ??= (async () => {
    const script = join(packageRoot(), 'scripts', 'build-upgrades.sh')
    const stdout = await runBuildScript(script, "to build Cluster API's and Tekton's conversion webhooks")
    const tools: UpgradeTools = { capiConversion: '', tektonConversion: '', capiCrds: {}, tektonCrds: {} }
    for (const line of stdout.split('\n')) {
      const eq = line.indexOf('=')
      if (eq <= 0) continue
      const key = line.slice(0, eq).trim()
      const value = line.slice(eq + 1).trim()
      if (key === 'capi-conversion') tools.capiConversion = value
      else if (key === 'tekton-conversion') tools.tektonConversion = value
      else if (key.startsWith('capi-crds-')) tools.capiCrds[key.slice('capi-crds-'.length)] = value
      else if (key.startsWith('tekton-crds-')) tools.tektonCrds[key.slice('tekton-crds-'.length)] = value
    }
    if (!tools.capiConversion || !tools.tektonConversion) throw new Error(`${script} did not print both webhook binaries:\n${stdout}`)
    return tools
  })().catch((err: unknown) => {
    pendingTools = undefined
    throw err
  })
  return pendingTools
}

/** The CRDs of `dir` (one per file), those named in `names` only (`clusters.cluster.x-k8s.io`, ...), in that order. */
export async function readCrds(dir: string, names: readonly string[]): Promise<CrdManifest[]> {
  const byName = new Map<string, CrdManifest>()
  for (const f of (await readdir(dir)).filter((f) => f.endsWith('.yaml'))) {
    for (const doc of parseAllDocuments(await readFile(join(dir, f), 'utf8'))) {
      const crd = doc.toJS() as CrdManifest | null
      if (crd?.['kind'] === 'CustomResourceDefinition') byName.set(crd.metadata.name, crd)
    }
  }
  return names.map((n) => {
    const crd = byName.get(n)
    if (!crd) throw new Error(`no CRD ${n} in ${dir}`)
    return crd
  })
}

export interface RealWebhook {
  readonly name: string
  /** `https://127.0.0.1:<port>/convert` */
  readonly url: string
  /** Base64 PEM of the CA that signed its serving certificate. */
  readonly caBundle: string
  readonly logFile: string
  /** ConversionReviews it has answered (its /healthz counter). */
  reviews(): Promise<number>
  /** The last lines of its log. */
  tail(lines?: number): string
  stop(): Promise<void>
}

/**
 * Starts a conversion webhook binary (`--listen --cert --key`, and `extraArgs`) and waits
 * until it answers /healthz over TLS with its CA.
 */
export async function startRealWebhook(name: string, binary: string, extraArgs: string[] = []): Promise<RealWebhook> {
  const dir = await mkdtemp(join(tmpdir(), `crd-migrator-${name}-`))
  removeDirAtExit(dir)
  await mkdir(join(dir, 'run'))
  const guard = startGuard(dir)
  const certs = await generateDevCertificates(join(dir, 'certs'), { serviceName: name, namespace: 'default' })
  const [port] = await freePorts(1)
  const logFile = join(dir, `${name}.log`)
  const proc = ManagedProcess.start({
    name,
    command: binary,
    args: [`--listen=127.0.0.1:${port}`, `--cert=${certs.certFile}`, `--key=${certs.keyFile}`, ...extraArgs],
    logFile,
    pidFile: join(dir, 'run', `${name}.pid`),
  })
  let stopped = false
  const stop = async (): Promise<void> => {
    if (stopped) return
    stopped = true
    await proc.stop(5_000)
    guard.disarm()
    await rm(dir, { recursive: true, force: true })
    releaseDirAtExit(dir)
  }
  const healthz = (): Promise<string | undefined> =>
    new Promise((resolve) => {
      const req = https.get({ host: '127.0.0.1', port, path: '/healthz', ca: certs.caCertPem, timeout: 2_000 }, (res) => {
        let body = ''
        res.setEncoding('utf8').on('data', (d: string) => (body += d))
        res.on('end', () => resolve(res.statusCode === 200 ? body : undefined))
      })
      req.on('timeout', () => req.destroy())
      req.on('error', () => resolve(undefined))
    })
  const outcome = await poll(30_000, async () => {
    if (!proc.running) return 'exited during startup'
    return (await healthz()) ? 'healthy' : undefined
  })
  if (outcome !== 'healthy') {
    const tail = proc.tail(20)
    await stop()
    throw new Error(`${name} ${outcome ?? 'did not answer /healthz in 30s'}:\n${tail}`)
  }
  return {
    name,
    url: `https://127.0.0.1:${port}/convert`,
    caBundle: Buffer.from(certs.caCertPem).toString('base64'),
    logFile,
    async reviews() {
      const body = await healthz()
      return Number(/ok (\d+)/.exec(body ?? '')?.[1] ?? NaN)
    },
    tail: (lines = 30) => proc.tail(lines),
    stop,
  }
}

/** `crd` with spec.conversion pointing at `webhook` (what an operator's install does with its Service). */
export function withConversion(crd: CrdManifest, webhook: RealWebhook): CrdManifest {
  return {
    ...crd,
    spec: {
      ...crd.spec,
      conversion: {
        strategy: 'Webhook',
        webhook: { clientConfig: { url: webhook.url, caBundle: webhook.caBundle }, conversionReviewVersions: ['v1', 'v1beta1'] },
      },
    },
  }
}

/** `crd` with `version` no longer served (the release that stops serving it). */
export function withUnserved(crd: CrdManifest, version: string): CrdManifest {
  return { ...crd, spec: { ...crd.spec, versions: crd.spec.versions.map((v) => (v.name === version ? { ...v, served: false } : v)) } }
}

/** `crd` without `versions` in spec.versions (the release that drops them). */
export function withoutVersions(crd: CrdManifest, versions: readonly string[]): CrdManifest {
  return { ...crd, spec: { ...crd.spec, versions: crd.spec.versions.filter((v) => !versions.includes(v.name)) } }
}

export const UPGRADE_FIELD_MANAGER = 'real-upgrades-operator'

/**
 * Server-side applies each CRD as an operator's install does (one field manager, forced),
 * waits until it is Established with its storage version served. Throws with the API
 * server's message when an apply is refused; returns each CRD as the server has it.
 */
export async function applyCrds(cp: ControlPlane, crds: readonly CrdManifest[], timeoutMs = 30_000): Promise<Obj[]> {
  for (const crd of crds) {
    const res = await cp.apiRequest(
      `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}?fieldManager=${UPGRADE_FIELD_MANAGER}&force=true`,
      { method: 'PATCH', body: crd, contentType: 'application/apply-patch+yaml' },
    )
    if (res.status !== 200 && res.status !== 201)
      throw new Error(`apply CRD ${crd.metadata.name}: HTTP ${res.status} ${res.body.slice(0, 500)}`)
  }
  const out: Obj[] = []
  const deadline = Date.now() + timeoutMs
  for (const crd of crds) {
    const storage = crd.spec.versions.find((v) => v.storage)!.name
    const path = `/apis/${crd.spec.group}/${storage}/${crd.spec.names.plural}?limit=1`
    const ready = async () => {
      const res = await cp.apiRequest(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`)
      const current = res.json as { status?: { conditions?: Array<{ type: string; status: string }> } } & Obj
      const established = current.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True')
      const served = crd.spec.versions.find((v) => v.storage)!.served
      return established && (!served || (await cp.apiRequest(path)).status === 200) ? current : undefined
    }
    out.push(
      await waitFor(`CRD ${crd.metadata.name} Established and served`, deadline - Date.now(), ready, {
        timedOut: () => new Error(`CRD ${crd.metadata.name} not Established and served after ${timeoutMs}ms`),
      }),
    )
  }
  return out
}

/** Deletes the CRDs and waits until they are gone (their objects deleted), so they can be created again. */
export async function deleteCrds(cp: ControlPlane, names: readonly string[], timeoutMs = 60_000): Promise<void> {
  const path = (name: string) => `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`
  for (const name of names) await cp.apiRequest(path(name), { method: 'DELETE' })
  const deadline = Date.now() + timeoutMs
  for (const name of names) {
    await waitFor(`CRD ${name} gone`, deadline - Date.now(), async () => (await cp.apiRequest(path(name))).status === 404 || undefined, {
      everyMs: 200,
      timedOut: () => new Error(`CRD ${name} still there ${timeoutMs}ms after its deletion`),
    })
  }
}

/** Every object of `group`/`plural` as etcd holds it, by `namespace/name`. */
export async function etcdObjects(cp: ControlPlane, group: string, plural: string): Promise<Map<string, Obj>> {
  const prefix = `/registry/${group}/${plural}/`
  const out = new Map<string, Obj>()
  for (const key of await cp.listEtcdKeys(prefix)) {
    const raw = await cp.readEtcdKey(key)
    if (raw) out.set(key.slice(prefix.length), JSON.parse(raw.toString('utf8')) as Obj)
  }
  return out
}

/** Every object of `group`/`plural` read through `version` (the API server converts), by `namespace/name`. */
export async function readThrough(cp: ControlPlane, group: string, version: string, plural: string): Promise<Map<string, Obj>> {
  const res = await cp.apiRequest(`/apis/${group}/${version}/${plural}`)
  if (res.status !== 200) throw new Error(`GET /apis/${group}/${version}/${plural}: HTTP ${res.status} ${res.body.slice(0, 500)}`)
  const out = new Map<string, Obj>()
  for (const item of (res.json as { items: Obj[] }).items) {
    const m = item['metadata'] as { namespace: string; name: string }
    out.set(`${m.namespace}/${m.name}`, item)
  }
  return out
}

/**
 * What a rewrite may change without changing content: the fields the API server keeps
 * (resourceVersion, managedFields, ...). The rest of metadata, spec, status and every other
 * top-level field are compared.
 */
export function content(o: Obj): Obj {
  const { metadata, apiVersion: _apiVersion, ...rest } = o
  // No labels and no annotations are empty maps (as the product's lossless check reads them): an added annotation is named by its key.
  const m: Obj = { labels: {}, annotations: {}, ...(metadata as Obj) }
  for (const k of ['resourceVersion', 'managedFields', 'generation', 'creationTimestamp', 'uid', 'selfLink']) delete m[k]
  return { ...rest, metadata: m }
}

export interface ValueChange {
  path: string
  change: 'removed' | 'added' | 'changed'
  before?: unknown
  after?: unknown
}

/** Every leaf that differs between `a` and `b` (arrays compared element by element), as `spec.x[0].y` paths. */
export function diffValues(a: unknown, b: unknown, path = ''): ValueChange[] {
  const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v)
  if (isObj(a) && isObj(b)) {
    const out: ValueChange[] = []
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
      const p = /^[A-Za-z_$][\w$-]*$/.test(k) ? (path ? `${path}.${k}` : k) : `${path}[${JSON.stringify(k)}]`
      if (!(k in b)) out.push({ path: p, change: 'removed', before: a[k] })
      else if (!(k in a)) out.push({ path: p, change: 'added', after: b[k] })
      else out.push(...diffValues(a[k], b[k], p))
    }
    return out
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    const out: ValueChange[] = []
    for (let i = 0; i < Math.max(a.length, b.length); i++) {
      const p = `${path}[${i}]`
      if (i >= b.length) out.push({ path: p, change: 'removed', before: a[i] })
      else if (i >= a.length) out.push({ path: p, change: 'added', after: b[i] })
      else out.push(...diffValues(a[i], b[i], p))
    }
    return out
  }
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [{ path, change: 'changed', before: a, after: b }]
}

/** `path` with indexes as `[*]`: `spec.steps[3].image` → `spec.steps[*].image`. */
export function pathPattern(path: string): string {
  return path.replace(/\[\d+\]/g, '[*]')
}

/** Whether `pattern` (a field path, `[*]` for any index) names `path` or a field above it. */
export function covers(pattern: string, path: string): boolean {
  const p = pathPattern(path)
  return p === pattern || p.startsWith(`${pattern}.`) || p.startsWith(`${pattern}[`)
}
