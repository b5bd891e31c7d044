/**
 * Helpers for the fault tests (test/integration/faults-*.test.ts): what etcd holds per
 * object, etcd compaction, a migrator identity that is not system:masters, and logs
 * captured in memory.
 */
import PQueue from 'p-queue'
import type { ControlPlane } from '../../dev/controlplane/controlplane.js'
import { etcdPost } from '../../dev/controlplane/etcd.js'
import { KubeHttp } from '../../src/kube/http.js'
import { listOrderKey } from '../../src/kube/paths.js'
import { kubeConfigFromFile } from './controlplane.js'
import { untilGranted } from './rbac.js'
import { until } from './until.js'

/** `namespace/name` (the migrator's list key) -> apiVersion stored in etcd. */
export async function etcdVersionsByKey(cp: ControlPlane, group: string, plural: string): Promise<Map<string, string>> {
  const prefix = `/registry/${group}/${plural}/`
  const keys = await cp.listEtcdKeys(prefix)
  const out = new Map<string, string>()
  const queue = new PQueue({ concurrency: 32 })
  for (const key of keys) {
    void queue.add(async () => {
      const raw = await cp.readEtcdKey(key)
      const rest = key.slice(prefix.length).split('/')
      const id = rest.length === 2 ? listOrderKey(rest[0], rest[1]!) : listOrderKey(undefined, rest[0]!)
      out.set(id, raw ? (JSON.parse(raw.toString('utf8')) as { apiVersion: string }).apiVersion : 'missing')
    })
  }
  await queue.onIdle()
  return out
}

/**
 * etcdVersionsByKey once it holds still: the same for `stableMs` in reads `everyMs` apart.
 * After a client is killed, the writes it had sent may still be in the API server (queued
 * for its CPU on a busy machine) and land later; what etcd holds "at the kill" is what
 * it holds once they have.
 */
export async function settledEtcdVersions(
  cp: ControlPlane,
  group: string,
  plural: string,
  { stableMs = 1500, everyMs = 250, timeoutMs = 60_000 } = {},
): Promise<Map<string, string>> {
  let last = await etcdVersionsByKey(cp, group, plural)
  let stableSince = Date.now()
  const settled = await until(
    `etcd's ${group}/${plural} to hold still for ${stableMs} ms`,
    timeoutMs,
    async () => {
      const now = await etcdVersionsByKey(cp, group, plural)
      const same = now.size === last.size && [...now].every(([k, v]) => last.get(k) === v)
      if (!same) stableSince = Date.now()
      last = now
      return { now, stableForMs: Date.now() - stableSince }
    },
    ({ stableForMs }) => stableForMs >= stableMs,
    { everyMs },
  )
  return settled.now
}

/** apiVersion -> number of objects, from a per-key map. */
export function countVersions(byKey: Map<string, string>): Record<string, number> {
  const counts: Record<string, number> = {}
  for (const v of byKey.values()) counts[v] = (counts[v] ?? 0) + 1
  return counts
}

/**
 * Compacts etcd's history up to its current revision (after one write of a key outside
 * /registry, so every revision the API server handed out so far is gone). Continue tokens
 * issued before this point are answered 410 Gone by a list served from etcd.
 */
export async function compactEtcd(cp: ControlPlane): Promise<number> {
  const key = Buffer.from('/crd-migrator-test/compaction-bump').toString('base64')
  const put = await etcdPost<{ header: { revision: string } }>(cp.etcdEndpoint, '/v3/kv/put', {
    key,
    value: Buffer.from(String(Date.now())).toString('base64'),
  })
  const revision = Number(put.header.revision)
  await etcdPost(cp.etcdEndpoint, '/v3/kv/compaction', { revision: String(revision), physical: true })
  return revision
}

/**
 * A user that is not system:masters (whom the API server exempts from max-in-flight
 * limits) with the RBAC the Helm chart grants the migrator for `group`. Returns a KubeHttp
 * of that user, or a subclass of KubeHttp built by `make`.
 */
export async function migratorIdentity<H extends KubeHttp = KubeHttp>(
  cp: ControlPlane,
  name: string,
  group: string,
  make: (kc: ReturnType<typeof kubeConfigFromFile>) => H = (kc) => new KubeHttp(kc, { maxSockets: 64 }) as H,
): Promise<{ http: H; certPem: string; keyPem: string }> {
  const role = `crd-migrator-test-${name}`
  const post = async (path: string, body: unknown) => {
    const res = await cp.apiRequest(path, { method: 'POST', body })
    if (res.status !== 201 && res.status !== 409) throw new Error(`POST ${path}: ${res.status} ${res.body}`)
  }
  await post('/apis/rbac.authorization.k8s.io/v1/clusterroles', {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRole',
    metadata: { name: role },
    rules: [
      { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['get', 'list', 'watch', 'patch'] },
      { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions/status'], verbs: ['patch'] },
      { apiGroups: [group], resources: ['*'], verbs: ['get', 'list', 'patch'] },
      { apiGroups: [''], resources: ['events'], verbs: ['create', 'patch'] },
    ],
  })
  await post('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: role },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
    subjects: [{ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name }],
  })
  await untilGranted(cp, { apiGroups: [group], resources: ['*'], verbs: ['patch'] }, { kind: 'User', name })
  const user = await cp.mintUser(name, [])
  return { http: make(kubeConfigFromFile(user.kubeconfigPath)), certPem: user.certPem, keyPem: user.keyPem }
}

export { capturingLogger } from './log-capture.js'
