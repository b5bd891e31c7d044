/**
 * The node agent's view of the API: the few object shapes it reads and writes (raw JSON,
 * so timestamps are strings), and small helpers on {@link KubeHttp} for them.
 */
import type { V1ContainerStatus, V1PodCondition, V1PodSpec } from '@kubernetes/client-node'
import type { KubeHttp } from '../../src/kube/http.js'
import { isNotFound } from '../../src/kube/api-errors.js'

export interface ObjectMeta {
  name: string
  namespace?: string
  uid?: string
  resourceVersion?: string
  labels?: Record<string, string>
  annotations?: Record<string, string>
  deletionTimestamp?: string
  deletionGracePeriodSeconds?: number
  creationTimestamp?: string
  ownerReferences?: Array<{ kind: string; name: string; uid: string; controller?: boolean }>
}

export interface PodStatus {
  phase?: string
  reason?: string
  message?: string
  hostIP?: string
  hostIPs?: Array<{ ip: string }>
  podIP?: string
  podIPs?: Array<{ ip: string }>
  startTime?: string
  qosClass?: string
  conditions?: Array<
    Omit<V1PodCondition, 'lastProbeTime' | 'lastTransitionTime'> & { lastProbeTime?: string | null; lastTransitionTime?: string }
  >
  containerStatuses?: JsonContainerStatus[]
}

/** A container status as JSON (the generated type has Date fields). */
export type JsonContainerStatus = Omit<V1ContainerStatus, 'state' | 'lastState'> & {
  state?: ContainerState
  lastState?: ContainerState
}

export interface ContainerState {
  waiting?: { reason?: string; message?: string }
  running?: { startedAt?: string }
  terminated?: {
    exitCode: number
    signal?: number
    reason?: string
    message?: string
    startedAt?: string
    finishedAt?: string
    containerID?: string
  }
}

export interface Pod {
  apiVersion?: string
  kind?: string
  metadata: ObjectMeta & { namespace: string; uid: string }
  spec: V1PodSpec
  status?: PodStatus
}

export interface Secret {
  metadata: ObjectMeta
  data?: Record<string, string>
  stringData?: Record<string, string>
}

export interface ConfigMap {
  metadata: ObjectMeta
  data?: Record<string, string>
  binaryData?: Record<string, string>
}

export const podKey = (pod: { metadata: { namespace?: string; name: string } }): string =>
  `${pod.metadata.namespace ?? ''}/${pod.metadata.name}`

/** GET an object, undefined when it does not exist. */
export async function getOptional<T>(http: KubeHttp, path: string): Promise<T | undefined> {
  try {
    return (await http.request<T>({ method: 'GET', path })).body
  } catch (err) {
    if (isNotFound(err)) return undefined
    throw err
  }
}

/** The data of a Secret (decoded) or ConfigMap (data and binaryData), by key; undefined when the object is missing. */
export async function readKeyedData(
  http: KubeHttp,
  kind: 'Secret' | 'ConfigMap',
  namespace: string,
  name: string,
): Promise<Map<string, Buffer> | undefined> {
  const path = `/api/v1/namespaces/${namespace}/${kind === 'Secret' ? 'secrets' : 'configmaps'}/${name}`
  const obj = await getOptional<Secret & ConfigMap>(http, path)
  if (!obj) return undefined
  const out = new Map<string, Buffer>()
  if (kind === 'Secret') {
    for (const [k, v] of Object.entries(obj.data ?? {})) out.set(k, Buffer.from(v, 'base64'))
  } else {
    for (const [k, v] of Object.entries(obj.data ?? {})) out.set(k, Buffer.from(v, 'utf8'))
    for (const [k, v] of Object.entries(obj.binaryData ?? {})) out.set(k, Buffer.from(v, 'base64'))
  }
  return out
}

/** Errors in one line, for status messages and logs. */
export function describeError(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ').slice(0, 500)
}
