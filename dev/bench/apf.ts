/**
 * The chart's API Priority and Fairness objects, for the bench: built from the same
 * charts/crd-migrator/files/flowcontrol.yaml and values.yaml (apiPriorityAndFairness) that
 * templates/flowschema.yaml renders, so the bench measures what the chart installs
 * (test/integration/chart-apf.test.ts compares the two renders). Installed and removed
 * between the runs of the good-neighbour case, each time waiting until the API server
 * classifies the migrator's requests accordingly: APF names the FlowSchema and priority
 * level of every request in the response headers X-Kubernetes-PF-FlowSchema-UID and
 * X-Kubernetes-PF-PriorityLevel-UID.
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { parse } from 'yaml'
import { type KubeHttp } from '../../src/kube/http.js'
import { KubeApiError } from '../../src/kube/api-errors.js'
import { packageRoot } from '../controlplane/binaries.js'
import { waitFor } from '../wait.js'

export const FLOWCONTROL_API = '/apis/flowcontrol.apiserver.k8s.io/v1'

export interface FlowControlObject {
  apiVersion: 'flowcontrol.apiserver.k8s.io/v1'
  kind: 'PriorityLevelConfiguration' | 'FlowSchema'
  metadata: { name: string; labels?: Record<string, string>; uid?: string }
  spec: Record<string, unknown>
}

export interface FlowControlOptions {
  /** The chart's full name: the priority level's and the bulk FlowSchema's name; `<name>-control` the other. */
  name: string
  serviceAccount: { namespace: string; name: string }
  /** Default: values.yaml's apiPriorityAndFairness.nominalConcurrencyShares. */
  nominalConcurrencyShares?: number
  labels?: Record<string, string>
}

interface SharedSpec {
  priorityLevel: { type: string; limited: Record<string, unknown> }
  control: { matchingPrecedence: number; priorityLevel: string; resourceRules: unknown[] }
  bulk: { matchingPrecedence: number; resourceRules: unknown[] }
}

const chartDir = () => join(packageRoot(), 'charts', 'crd-migrator')

/** values.yaml's apiPriorityAndFairness block. */
export async function chartApfValues(): Promise<{ enabled: boolean; nominalConcurrencyShares: number }> {
  const values = parse(await readFile(join(chartDir(), 'values.yaml'), 'utf8')) as {
    apiPriorityAndFairness: { enabled: boolean; nominalConcurrencyShares: number }
  }
  return values.apiPriorityAndFairness
}

/** The PriorityLevelConfiguration and the two FlowSchemas, in the order to create them. */
export async function flowControlObjects(o: FlowControlOptions): Promise<FlowControlObject[]> {
  const shared = parse(await readFile(join(chartDir(), 'files', 'flowcontrol.yaml'), 'utf8')) as SharedSpec
  const shares = o.nominalConcurrencyShares ?? (await chartApfValues()).nominalConcurrencyShares
  const metadata = (name: string) => ({ name, ...(o.labels ? { labels: o.labels } : {}) })
  const subjects = [{ kind: 'ServiceAccount', serviceAccount: { namespace: o.serviceAccount.namespace, name: o.serviceAccount.name } }]
  const flowSchema = (name: string, precedence: number, level: string, resourceRules: unknown[]): FlowControlObject => ({
    apiVersion: 'flowcontrol.apiserver.k8s.io/v1',
    kind: 'FlowSchema',
    metadata: metadata(name),
    spec: {
      matchingPrecedence: precedence,
      priorityLevelConfiguration: { name: level },
      distinguisherMethod: { type: 'ByUser' },
      rules: [{ subjects, resourceRules }],
    },
  })
  return [
    {
      apiVersion: 'flowcontrol.apiserver.k8s.io/v1',
      kind: 'PriorityLevelConfiguration',
      metadata: metadata(o.name),
      spec: { type: shared.priorityLevel.type, limited: { ...shared.priorityLevel.limited, nominalConcurrencyShares: shares } },
    },
    flowSchema(`${o.name}-control`, shared.control.matchingPrecedence, shared.control.priorityLevel, shared.control.resourceRules),
    flowSchema(o.name, shared.bulk.matchingPrecedence, o.name, shared.bulk.resourceRules),
  ]
}

const pathOf = (o: FlowControlObject) =>
  `${FLOWCONTROL_API}/${o.kind === 'FlowSchema' ? 'flowschemas' : 'prioritylevelconfigurations'}/${o.metadata.name}`

/** The FlowSchema and priority level the API server put a request of `client` in. */
export async function classify(client: KubeHttp, path: string): Promise<{ flowSchemaUid: string; priorityLevelUid: string }> {
  const res = await client.requestRaw({ method: 'GET', path })
  const header = (name: string) => {
    const v = res.headers[name]
    return typeof v === 'string' ? v : ''
  }
  return { flowSchemaUid: header('x-kubernetes-pf-flowschema-uid'), priorityLevelUid: header('x-kubernetes-pf-prioritylevel-uid') }
}

/**
 * Creates the objects (as `admin`) and waits until a request of `migrator` to `probePath`
 * (a bulk request: any resource but the control ones) lands in the new priority level.
 * Returns the objects as created (with their uids).
 */
export async function installFlowControl(
  admin: KubeHttp,
  migrator: KubeHttp,
  objects: FlowControlObject[],
  probePath: string,
  timeoutMs = 30_000,
): Promise<FlowControlObject[]> {
  const created: FlowControlObject[] = []
  for (const o of objects) {
    const collection = pathOf(o).replace(/\/[^/]+$/, '')
    created.push((await admin.request<FlowControlObject>({ method: 'POST', path: collection, body: o })).body)
  }
  const level = created.find((o) => o.kind === 'PriorityLevelConfiguration')!
  return waitFor(
    `FlowSchema ${level.metadata.name} in use`,
    timeoutMs,
    async () => ((await classify(migrator, probePath)).priorityLevelUid === level.metadata.uid ? created : undefined),
    { timedOut: () => new Error(`the API server did not use FlowSchema ${level.metadata.name} within ${timeoutMs / 1000} s`) },
  )
}

/** Deletes the objects and waits until `migrator`'s requests are no longer in their level. */
export async function removeFlowControl(
  admin: KubeHttp,
  migrator: KubeHttp,
  objects: FlowControlObject[],
  probePath: string,
  timeoutMs = 30_000,
): Promise<void> {
  for (const o of [...objects].reverse()) {
    await admin.request({ method: 'DELETE', path: pathOf(o) }).catch((err: unknown) => {
      if (!(err instanceof KubeApiError && err.status === 404)) throw err
    })
  }
  const uids = new Set(objects.map((o) => o.metadata.uid).filter(Boolean))
  await waitFor(
    "the bench's FlowSchema out of use",
    timeoutMs,
    async () => !uids.has((await classify(migrator, probePath)).priorityLevelUid) || undefined,
    { timedOut: () => new Error(`the API server still used the bench's FlowSchema ${timeoutMs / 1000} s after its deletion`) },
  )
}

/** The seats APF gives a priority level (apiserver_flowcontrol_nominal_limit_seats), from /metrics. */
export async function nominalSeats(admin: KubeHttp, level: string): Promise<number | null> {
  const res = await admin.requestRaw({ method: 'GET', path: '/metrics' })
  const line = new RegExp(
    `^apiserver_flowcontrol_nominal_limit_seats\\{priority_level="${level.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}"\\} (\\S+)$`,
    'm',
  ).exec(res.body)
  return line ? Number(line[1]) : null
}

/** Names of APF priority levels by uid (the response headers carry uids), looked up once each. */
export function levelNames(http: KubeHttp): (uid: string) => Promise<string> {
  const names = new Map<string, string>()
  return async (uid) => {
    if (!names.has(uid)) {
      const list = await http.request<{ items: Array<{ metadata: { name: string; uid: string } }> }>({
        method: 'GET',
        path: `${FLOWCONTROL_API}/prioritylevelconfigurations`,
      })
      for (const item of list.body.items) names.set(item.metadata.uid, item.metadata.name)
    }
    return names.get(uid) ?? `unknown (${uid || 'no APF headers'})`
  }
}
