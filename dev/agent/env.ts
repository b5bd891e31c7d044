/**
 * A container's environment, as the kubelet builds it: the image's ENV, then the service
 * variables of the `kubernetes` Service (KUBERNETES_SERVICE_HOST/PORT... pointing at the
 * API server as pods reach it, api-proxy.ts), then `envFrom`, then `env` (later ones win),
 * with `$(VAR)` references expanded and `valueFrom` resolved: fieldRef (the downward API),
 * resourceFieldRef, secretKeyRef and configMapKeyRef.
 *
 * Not done: service links of the pod's own namespace (`enableServiceLinks`: there is no
 * kube-proxy, their ClusterIPs lead nowhere), fileKeyRef.
 */
import type { V1Container } from '@kubernetes/client-node'
import type { ApiServerForPods } from './api-proxy.js'
import type { Pod } from './kube.js'

/** Thrown for what the kubelet reports as CreateContainerConfigError. */
export class ContainerConfigError extends Error {}

export interface EnvContext {
  pod: Pod
  podIP: string
  nodeName: string
  hostIP: string
  api: ApiServerForPods
  imageEnv: Record<string, string>
  /** Node capacity for resourceFieldRef without a limit. */
  nodeCapacity: { cpu: number; memory: number }
  /** A Secret's or ConfigMap's data (undefined when it does not exist). */
  keyed(kind: 'Secret' | 'ConfigMap', name: string): Promise<Map<string, Buffer> | undefined>
}

/** `$(VAR)` -> its value when defined (else left as written); `$$` -> `$`. */
export function expand(text: string, lookup: (name: string) => string | undefined): string {
  return text.replace(/\$\$|\$\(([^)]*)\)/g, (match, name: string | undefined) => {
    if (match === '$$') return '$'
    const v = name === undefined ? undefined : lookup(name)
    return v ?? match
  })
}

const UNITS: Record<string, number> = {
  '': 1,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  Ki: 1024,
  Mi: 1024 ** 2,
  Gi: 1024 ** 3,
  Ti: 1024 ** 4,
}

/** A resource quantity (`100m`, `64Mi`, `1.5`) as a number. */
export function parseQuantity(q: string | number): number {
  if (typeof q === 'number') return q
  const m = /^([0-9.]+)([a-zA-Z]*)$/.exec(q.trim())
  const unit = m ? UNITS[m[2]!] : undefined
  if (!m || unit === undefined) throw new ContainerConfigError(`cannot parse quantity ${JSON.stringify(q)}`)
  return Number(m[1]) * unit
}

function fieldRef(path: string, ctx: EnvContext): string {
  const { pod } = ctx
  const labelOrAnnotation = /^metadata\.(labels|annotations)\['(.*)'\]$/.exec(path)
  if (labelOrAnnotation) {
    const map = labelOrAnnotation[1] === 'labels' ? pod.metadata.labels : pod.metadata.annotations
    return map?.[labelOrAnnotation[2]!] ?? ''
  }
  switch (path) {
    case 'metadata.name':
      return pod.metadata.name
    case 'metadata.namespace':
      return pod.metadata.namespace
    case 'metadata.uid':
      return pod.metadata.uid
    case 'spec.nodeName':
      return ctx.nodeName
    case 'spec.serviceAccountName':
      return pod.spec.serviceAccountName ?? 'default'
    case 'status.hostIP':
    case 'status.hostIPs':
      return ctx.hostIP
    case 'status.podIP':
    case 'status.podIPs':
      return ctx.podIP
    default:
      throw new ContainerConfigError(`unsupported fieldRef.fieldPath ${JSON.stringify(path)}`)
  }
}

function resourceFieldRef(
  ref: { resource: string; divisor?: string | number; containerName?: string },
  ctx: EnvContext,
  own: V1Container,
): string {
  const container = ref.containerName ? ctx.pod.spec.containers.find((c) => c.name === ref.containerName) : own
  if (!container) throw new ContainerConfigError(`resourceFieldRef: no container ${ref.containerName}`)
  const [kind, resource] = ref.resource.split('.') as ['limits' | 'requests', string]
  const set = container.resources?.[kind]?.[resource]
  const fallback = resource === 'cpu' ? ctx.nodeCapacity.cpu : resource === 'memory' ? ctx.nodeCapacity.memory : 0
  const value = set === undefined ? (kind === 'requests' ? 0 : fallback) : parseQuantity(set)
  const divisor = ref.divisor === undefined || ref.divisor === '0' ? 1 : parseQuantity(ref.divisor)
  return String(Math.ceil(value / divisor))
}

async function keyedValue(
  ctx: EnvContext,
  kind: 'Secret' | 'ConfigMap',
  ref: { name?: string; key: string; optional?: boolean },
): Promise<string | undefined> {
  const data = await ctx.keyed(kind, ref.name ?? '')
  const value = data?.get(ref.key)
  if (value !== undefined) return value.toString('utf8')
  if (ref.optional) return undefined
  throw new ContainerConfigError(
    data
      ? `couldn't find key ${ref.key} in ${kind} ${ctx.pod.metadata.namespace}/${ref.name}`
      : `${kind.toLowerCase()} "${ref.name}" not found`,
  )
}

/** The `kubernetes` Service's variables, as the kubelet sets them in every pod. */
export function kubernetesServiceEnv(api: ApiServerForPods): Record<string, string> {
  const url = `tcp://${api.host}:${api.port}`
  return {
    KUBERNETES_SERVICE_HOST: api.host,
    KUBERNETES_SERVICE_PORT: String(api.port),
    KUBERNETES_SERVICE_PORT_HTTPS: String(api.port),
    KUBERNETES_PORT: url,
    [`KUBERNETES_PORT_${api.port}_TCP`]: url,
    [`KUBERNETES_PORT_${api.port}_TCP_PROTO`]: 'tcp',
    [`KUBERNETES_PORT_${api.port}_TCP_PORT`]: String(api.port),
    [`KUBERNETES_PORT_${api.port}_TCP_ADDR`]: api.host,
  }
}

/** The container's environment (see the file comment); {@link ContainerConfigError} when a reference cannot be resolved. */
export async function containerEnv(container: V1Container, ctx: EnvContext): Promise<Map<string, string>> {
  const env = new Map<string, string>(Object.entries(ctx.imageEnv))
  for (const [k, v] of Object.entries(kubernetesServiceEnv(ctx.api))) env.set(k, v)
  const lookup = (name: string): string | undefined => env.get(name)
  for (const from of container.envFrom ?? []) {
    const kind = from.secretRef ? 'Secret' : 'ConfigMap'
    const ref = from.secretRef ?? from.configMapRef
    if (!ref) continue
    const data = await ctx.keyed(kind, ref.name ?? '')
    if (!data) {
      if (ref.optional) continue
      throw new ContainerConfigError(`${kind.toLowerCase()} "${ref.name}" not found`)
    }
    for (const [k, v] of data) env.set(`${from.prefix ?? ''}${k}`, v.toString('utf8'))
  }
  for (const e of container.env ?? []) {
    const vf = e.valueFrom
    let value: string | undefined
    if (!vf) value = expand(e.value ?? '', lookup)
    else if (vf.fieldRef) value = fieldRef(vf.fieldRef.fieldPath, ctx)
    else if (vf.resourceFieldRef) value = resourceFieldRef(vf.resourceFieldRef, ctx, container)
    else if (vf.secretKeyRef) value = await keyedValue(ctx, 'Secret', vf.secretKeyRef)
    else if (vf.configMapKeyRef) value = await keyedValue(ctx, 'ConfigMap', vf.configMapKeyRef)
    else throw new ContainerConfigError(`env ${e.name}: unsupported valueFrom ${Object.keys(vf).join(', ')}`)
    if (value !== undefined) env.set(e.name, value)
  }
  return env
}
