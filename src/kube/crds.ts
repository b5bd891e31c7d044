import { CrdMigratorError } from '../errors.js'
import { isNotFound } from './api-errors.js'
import { ContentType, type KubeRequests } from './http.js'
import { listPages } from './list-pages.js'
import { crdPath, CRD_API } from './paths.js'
import type { CustomResourceDefinition } from './types.js'

export async function getCrd(http: KubeRequests, name: string): Promise<CustomResourceDefinition> {
  return (await http.request<CustomResourceDefinition>({ method: 'GET', path: crdPath(name) })).body
}

/** getCrd, a 404 said as `status` says it, with a code (CRDM_RESOURCE_NOT_FOUND), rather than as the API server's 404. */
export async function getNamedCrd(http: KubeRequests, name: string): Promise<CustomResourceDefinition> {
  try {
    return await getCrd(http, name)
  } catch (err) {
    if (isNotFound(err))
      throw new CrdMigratorError('CRDM_RESOURCE_NOT_FOUND', `customresourcedefinition "${name}" not found`, { cause: err })
    throw err
  }
}

export async function listCrds(http: KubeRequests, labelSelector?: string): Promise<CustomResourceDefinition[]> {
  const items: CustomResourceDefinition[] = []
  for await (const page of listPages<CustomResourceDefinition>(http, CRD_API, { pageSize: 250, query: { labelSelector } }))
    items.push(...page.items)
  return items
}

/** Merge-patches annotations (null removes); with a resourceVersion only on that revision (else 409): the freeze froze the spec it read. */
export async function patchCrdAnnotations(
  http: KubeRequests,
  name: string,
  annotations: Record<string, string | null>,
  resourceVersion?: string,
): Promise<CustomResourceDefinition> {
  const metadata: Record<string, unknown> = { annotations }
  if (resourceVersion) metadata.resourceVersion = resourceVersion
  return (
    await http.request<CustomResourceDefinition>({
      method: 'PATCH',
      path: crdPath(name),
      body: { metadata },
      contentType: ContentType.mergePatch,
    })
  ).body
}
