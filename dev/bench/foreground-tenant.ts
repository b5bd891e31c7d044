/**
 * The foreground tenant of the good-neighbour and fleet cases: a user of its own (a client
 * certificate outside system:masters, so API Priority and Fairness puts it in
 * global-default like any authenticated user), allowed to read and patch its ConfigMaps,
 * and the foreground client (foreground.ts) run in a child process (child.js foreground).
 */
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { loadKubeConfig } from '../../src/kube/client.js'
import { ContentType, KubeHttp, kubeConnection } from '../../src/kube/http.js'
import type { ControlPlane } from '../controlplane/controlplane.js'
import { classify } from './apf.js'
import { ceilingConnection } from './ceiling.js'
import { FOREGROUND_CONFIGMAPS, type ForegroundOptions, type ForegroundSamples } from './foreground.js'

const CHILD_JS = fileURLToPath(new URL('./child.js', import.meta.url))

export interface ForegroundTenant {
  user: string
  /** The APF priority level the API server puts its requests in. */
  priorityLevel: string
  namespace: string
  configMap: string
  input: ForegroundOptions
}

/**
 * Creates (applies) the tenant's namespace, ConfigMaps and Role as `admin`, mints its user,
 * and finds its priority level (`levelOf`: a level's name by uid).
 */
export async function foregroundTenant(
  cp: ControlPlane,
  admin: KubeHttp,
  levelOf: (uid: string) => Promise<string>,
  ratePerSecond: number,
): Promise<ForegroundTenant> {
  const namespace = 'bench-foreground'
  const configMap = 'foreground'
  const configMaps = Array.from({ length: FOREGROUND_CONFIGMAPS }, (_, i) => `${configMap}-${i}`)
  const user = await cp.mintUser('bench-foreground')
  for (const [collection, body] of [
    ['/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } }],
    ...configMaps.map(
      (name) =>
        [
          `/api/v1/namespaces/${namespace}/configmaps`,
          { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name }, data: { seq: '0' } },
        ] as const,
    ),
    [
      `/apis/rbac.authorization.k8s.io/v1/namespaces/${namespace}/roles`,
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'Role',
        metadata: { name: 'foreground' },
        rules: [{ apiGroups: [''], resources: ['configmaps'], resourceNames: configMaps, verbs: ['get', 'patch'] }],
      },
    ],
    [
      `/apis/rbac.authorization.k8s.io/v1/namespaces/${namespace}/rolebindings`,
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'RoleBinding',
        metadata: { name: 'foreground' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'foreground' },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user.name }],
      },
    ],
  ] as const) {
    // Applied, not created: a control plane kept from an earlier run (--controlplane-state) has them already, maybe older.
    await admin.request({
      method: 'PATCH',
      path: `${collection}/${body.metadata.name}`,
      query: { fieldManager: 'crd-migrator-bench', force: true },
      body,
      contentType: ContentType.applyPatch,
    })
  }
  const userKc = loadKubeConfig(user.kubeconfigPath)
  const userHttp = new KubeHttp(userKc)
  let priorityLevel: string
  try {
    priorityLevel = await levelOf(
      (await classify(userHttp, `/api/v1/namespaces/${namespace}/configmaps/${configMaps[0]}`)).priorityLevelUid,
    )
  } finally {
    userHttp.close()
  }
  if (priorityLevel === 'exempt') throw new Error(`the foreground user ${user.name} is exempt from API Priority and Fairness`)
  return {
    user: user.name,
    priorityLevel,
    namespace,
    configMap,
    input: { connection: ceilingConnection(await kubeConnection(userKc)), namespace, configMap, ratePerSecond },
  }
}

/** The foreground client in its own process (child.js foreground), running until stop(). */
export async function startForegroundChild(input: ForegroundOptions): Promise<{ stop(): Promise<ForegroundSamples> }> {
  const child = spawn(process.execPath, [CHILD_JS, 'foreground'], { stdio: ['pipe', 'ignore', 'inherit', 'ipc'] })
  child.stdin!.end(JSON.stringify(input))
  const exited = new Promise<never>((_, reject) => child.once('exit', (code) => reject(new Error(`the foreground child exited (${code})`))))
  exited.catch(() => {}) // observed through the races below
  await Promise.race([new Promise((resolve) => child.once('message', resolve)), exited])
  return {
    async stop() {
      const samples = new Promise<ForegroundSamples>((resolve) =>
        child.once('message', (m) => resolve((m as { samples: ForegroundSamples }).samples)),
      )
      child.send({ stop: true })
      return Promise.race([samples, exited])
    },
  }
}

/** Runs `run` with the foreground client sending; returns its result and every foreground request. */
export async function withForeground<T>(
  input: ForegroundOptions,
  run: () => Promise<T>,
): Promise<{ result: T; samples: ForegroundSamples }> {
  const child = await startForegroundChild(input)
  const outcome = await run().then(
    (result) => ({ ok: true as const, result }),
    (error: unknown) => ({ ok: false as const, error }),
  )
  const samples = await child.stop()
  if (!outcome.ok) throw outcome.error
  return { result: outcome.result, samples }
}
