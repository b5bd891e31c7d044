/** Finds a resource as kubectl does, through discovery (`secrets`, `deployments.apps`, `widgets.v2.example.com`, or a GVR). */
import { CrdMigratorError } from '../errors.js'
import { type KubeHttp } from './http.js'
import { unlessNotFound } from './api-errors.js'
import { groupPath, groupVersionPath, type ResourceRef } from './paths.js'

export interface ResourceName {
  group: string
  /** Unset: the group's preferred version. */
  version?: string | undefined
  resource: string
}

interface ApiResourceList {
  resources?: Array<{ name: string; kind: string; namespaced: boolean; verbs?: string[] }>
}

/** `resource[.version].group`, or `resource` alone for the core group. */
export function parseResourceName(text: string): ResourceName {
  const [resource, ...rest] = text.split('.')
  if (!resource)
    throw new CrdMigratorError('CRDM_CONFIG_INVALID', `not a resource name: ${JSON.stringify(text)} (e.g. secrets, deployments.apps)`)
  if (rest.length === 0) return { group: '', resource }
  // `widgets.v2.example.com`: a version segment right after the resource.
  if (/^v\d+((alpha|beta)\d+)?$/.test(rest[0]!) && rest.length > 1) return { resource, version: rest[0], group: rest.slice(1).join('.') }
  return { resource, group: rest.join('.') }
}

export function describeResourceName(r: ResourceName): string {
  return [r.resource, r.version, r.group].filter((p) => p !== undefined && p !== '').join('.')
}

export async function resolveResource(http: KubeHttp, name: ResourceName): Promise<ResourceRef> {
  const version = name.version || (await preferredVersion(http, name.group))
  const path = groupVersionPath({ group: name.group, version })
  const list = await unlessNotFound(http.request<ApiResourceList>({ method: 'GET', path }))
  if (!list) throw notServed(name, `${name.group || 'core'}/${version} is not served`)
  const found = list.body.resources?.find((r) => r.name === name.resource)
  if (!found) throw notServed(name, `no resource ${name.resource} in ${name.group ? `${name.group}/` : ''}${version}`)
  if (!(found.verbs ?? []).includes('patch') || !(found.verbs ?? []).includes('list'))
    throw notServed(name, `${name.resource} cannot be listed and patched, so it cannot be rewritten`)
  return { group: name.group, version, plural: found.name, kind: found.kind, namespaced: found.namespaced }
}

async function preferredVersion(http: KubeHttp, group: string): Promise<string> {
  if (group === '') return 'v1'
  const g = await unlessNotFound(http.request<{ preferredVersion?: { version?: string } }>({ method: 'GET', path: groupPath(group) }))
  if (g?.body.preferredVersion?.version) return g.body.preferredVersion.version
  throw new CrdMigratorError('CRDM_RESOURCE_NOT_FOUND', `the API server serves no group ${JSON.stringify(group)}`)
}

function notServed(name: ResourceName, why: string): CrdMigratorError {
  return new CrdMigratorError('CRDM_RESOURCE_NOT_FOUND', `cannot migrate ${describeResourceName(name)}: ${why}`)
}
