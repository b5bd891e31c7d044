/** The CRDs `check` and `plan` look at, read without listing every full CRD of the cluster. */
import type { Config } from '../config/schema.js'
import { CrdSelection } from './selector.js'
import { unlessNotFound } from '../kube/api-errors.js'
import { getCrd, listCrds } from '../kube/crds.js'
import type { KubeHttp } from '../kube/http.js'
import type { CustomResourceDefinition } from '../kube/types.js'

/** Every managed CRD (migrator.selector), in name order; a name the selector holds that does not exist is left out. */
export async function managedCrds(http: KubeHttp, selector: Config['migrator']['selector']): Promise<CustomResourceDefinition[]> {
  const selection = new CrdSelection(selector) // refuses a selector the API server would refuse
  const byName = new Map<string, CustomResourceDefinition>()
  if (selector.labelSelector.trim() !== '')
    for (const crd of await listCrds(http, selector.labelSelector)) byName.set(crd.metadata.name, crd)
  const named = await crdsByName(
    http,
    selector.names.filter((n) => !byName.has(n)),
  )
  for (const crd of named.crds) byName.set(crd.metadata.name, crd)
  return [...byName.values()].filter((crd) => selection.selects(crd)).sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))
}

/** The named CRDs (managed or not), else every managed one; named ones that do not exist in `missing`. */
export async function namedOrManagedCrds(
  http: KubeHttp,
  selector: Config['migrator']['selector'],
  names: readonly string[],
): ReturnType<typeof crdsByName> {
  return names.length ? crdsByName(http, names) : { crds: await managedCrds(http, selector), missing: [] }
}

export async function crdsByName(http: KubeHttp, names: readonly string[]) {
  const crds: CustomResourceDefinition[] = []
  const missing: string[] = []
  for (const name of names) {
    const crd = await unlessNotFound(getCrd(http, name))
    if (crd) crds.push(crd)
    else missing.push(name)
  }
  return { crds, missing }
}
