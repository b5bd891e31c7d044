import { ContentType, type KubeHttp } from './http.js'
import { listPages } from './list-pages.js'
import { crdPath, CRD_API } from './paths.js'
import type { CustomResourceDefinition } from './types.js'

export async function getCrd(http: KubeHttp, name: string): Promise<CustomResourceDefinition> {
  return (await http.request<CustomResourceDefinition>({ method: 'GET', path: crdPath(name) })).body
}

export async function listCrds(http: KubeHttp, labelSelector?: string): Promise<CustomResourceDefinition[]> {
  const items: CustomResourceDefinition[] = []
  for await (const page of listPages<CustomResourceDefinition>(http, CRD_API, { pageSize: 250, query: { labelSelector } }))
    items.push(...page.items)
  return items
}

/**
 * Sets (string) or removes (null) annotations with a JSON merge patch. With a
 * resourceVersion the patch only applies to exactly that revision of the CRD (409
 * otherwise), which is how the freeze knows it froze the spec it looked at.
 */
export async function patchCrdAnnotations(
  http: KubeHttp,
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

/** `status.storedVersions := versions`, only if the CRD is still at `resourceVersion`. */
export async function patchStoredVersions(
  http: KubeHttp,
  name: string,
  versions: string[],
  resourceVersion: string,
): Promise<CustomResourceDefinition> {
  return (
    await http.request<CustomResourceDefinition>({
      method: 'PATCH',
      path: crdPath(name, 'status'),
      body: { metadata: { resourceVersion }, status: { storedVersions: versions } },
      contentType: ContentType.mergePatch,
    })
  ).body
}
