/**
 * Control plane for integration tests.
 *
 * `npm test` (scripts/test.mjs) starts one control plane for the whole run and passes its
 * state file in CRD_MIGRATOR_TEST_CONTROLPLANE; getControlPlane() attaches to it. Run alone
 * (`npx tap test/integration/x.test.ts`), getControlPlane() starts a private one and stops it
 * when the test file ends. Tests share the control plane, and tap runs files in parallel:
 * every test uses its own CRD group (uniqueGroup) and namespaces (uniqueName), and anything
 * that stops or restarts processes must use startPrivateControlPlane(). A file running in a
 * network namespace of its own (helpers/network-namespace.ts) cannot reach the shared one and
 * gets a private one too.
 */
import { randomBytes } from 'node:crypto'
import { ApiException, ApiextensionsV1Api, CustomObjectsApi, KubeConfig, type V1CustomResourceDefinition } from '@kubernetes/client-node'
import t from 'tap'
import {
  attachControlPlane,
  ensureBinaries,
  startControlPlane,
  type ControlPlane,
  type ControlPlaneOptions,
} from '../../dev/controlplane/controlplane.js'
import { currentNetworkNamespace } from '../../dev/controlplane/netns.js'
import { until } from './until.js'

export const CONTROLPLANE_ENV = 'CRD_MIGRATOR_TEST_CONTROLPLANE'

/** Restore tap's per-file timeout window after a possibly long start (first-time build). */
function refreshTapTimeout(): void {
  t.setTimeout(Number(process.env['TAP_TIMEOUT'] ?? '30') * 1000)
}

/**
 * A control plane owned by this test file: started now, stopped when the file's tests end.
 * Use it for tests that stop or restart etcd / kube-apiserver, or need special flags.
 * `{ apiservers: 3 }` starts three API servers on one etcd, each in the `default/kubernetes`
 * EndpointSlice (needs root, and the file to run in a network namespace of its own: import
 * helpers/network-namespace.ts first; see ControlPlaneOptions).
 */
export async function startPrivateControlPlane(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  // A cold binary build takes minutes; do not let tap's per-file timeout kill it.
  t.setTimeout(30 * 60 * 1000)
  await ensureBinaries()
  const cp = await startControlPlane(opts)
  t.teardown(() => cp.stop())
  refreshTapTimeout()
  return cp
}

let shared: Promise<ControlPlane> | undefined

/** The run's shared control plane (or a private one when this file runs alone). */
export function getControlPlane(): Promise<ControlPlane> {
  shared ??= (async () => {
    // The shared control plane is in the host's network namespace.
    const stateFile = currentNetworkNamespace() ? undefined : process.env[CONTROLPLANE_ENV]
    if (stateFile) {
      const cp = await attachControlPlane(stateFile)
      t.teardown(() => cp.stop())
      return cp
    }
    return startPrivateControlPlane()
  })()
  return shared
}

/** `${prefix}-<random>.example.com`: a CRD group nobody else uses. */
export function uniqueGroup(prefix = 'test'): string {
  return `${prefix}-${randomBytes(4).toString('hex')}.example.com`
}

/** `${prefix}-<random>`: a DNS-1123 label, e.g. for namespaces. */
export function uniqueName(prefix = 'test'): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`
}

export function kubeConfigFromFile(path: string): KubeConfig {
  const kc = new KubeConfig()
  kc.loadFromFile(path)
  return kc
}

export interface Clients {
  kc: KubeConfig
  apiext: ApiextensionsV1Api
  custom: CustomObjectsApi
}

export function clientsFor(kubeconfigPath: string): Clients {
  const kc = kubeConfigFromFile(kubeconfigPath)
  return { kc, apiext: kc.makeApiClient(ApiextensionsV1Api), custom: kc.makeApiClient(CustomObjectsApi) }
}

/** HTTP status of a client-node error, or undefined for non-HTTP errors. */
export function statusOf(err: unknown): number | undefined {
  return err instanceof ApiException ? err.code : undefined
}

/** Wait until the CRD's Established condition is True (it is served only then). */
export async function waitForCrdEstablished(
  apiext: ApiextensionsV1Api,
  name: string,
  timeoutMs = 30_000,
): Promise<V1CustomResourceDefinition> {
  return until(
    `CRD ${name} Established`,
    timeoutMs,
    () => apiext.readCustomResourceDefinition({ name }),
    (crd) => crd.status?.conditions?.find((c) => c.type === 'Established')?.status === 'True',
  )
}

/**
 * Established, and every served version answers a list with 200. Right after Established the
 * CR watch cache is still initializing and lists get 429 "storage is (re)initializing"
 * (Retry-After: 1), which client-node does not retry. Note also that the API server sleeps
 * 2s in any CR *create* within 2s of the CRD becoming Established
 * (apiextensions-apiserver customresource_handler.go), so a fresh CRD costs ~2s.
 */
export async function waitForCrdReady(
  cp: ControlPlane,
  apiext: ApiextensionsV1Api,
  name: string,
  timeoutMs = 30_000,
): Promise<V1CustomResourceDefinition> {
  const deadline = Date.now() + timeoutMs
  const crd = await waitForCrdEstablished(apiext, name, timeoutMs)
  for (const v of crd.spec.versions.filter((v) => v.served)) {
    const path = `/apis/${crd.spec.group}/${v.name}/${crd.spec.names.plural}?limit=1`
    await until(
      `GET ${path} to answer 200`,
      Math.max(deadline - Date.now(), 0),
      async () => {
        const res = await cp.apiRequest(path)
        return { status: res.status, body: res.body.slice(0, 300) }
      },
      (res) => res.status === 200,
    )
  }
  return crd
}

export interface TwoVersionCrd {
  group: string
  plural: string
  kind: string
  name: string
  crd: V1CustomResourceDefinition
}

/**
 * A namespaced CRD `<plural>.<group>` with versions v1 (storage) and v2 (served), no
 * conversion webhook, and a schema preserving unknown fields so the same fields work in both.
 */
export function twoVersionCrd(group: string, opts: { plural?: string; kind?: string; storage?: 'v1' | 'v2' } = {}): TwoVersionCrd {
  const plural = opts.plural ?? 'widgets'
  const kind = opts.kind ?? 'Widget'
  const storage = opts.storage ?? 'v1'
  const schema = { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } }
  const name = `${plural}.${group}`
  return {
    group,
    plural,
    kind,
    name,
    crd: {
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name },
      spec: {
        group,
        scope: 'Namespaced',
        names: { plural, singular: kind.toLowerCase(), kind, listKind: `${kind}List` },
        versions: [
          { name: 'v1', served: true, storage: storage === 'v1', schema },
          { name: 'v2', served: true, storage: storage === 'v2', schema },
        ],
      },
    },
  }
}
