/**
 * Manifest custom resources at a version about to go: once the CRD no longer lists it, `kubectl
 * apply` (Helm, Flux) of the document fails ("no matches for kind … in version …"). Matching is
 * pure; the gates come from the check command, which knows the cluster.
 */
import { unlessNotFound } from '../kube/api-errors.js'
import { getCrd } from '../kube/crds.js'
import { apiGroup, groupVersionResources } from '../kube/discovery.js'
import type { KubeHttp } from '../kube/http.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import { conversionStrategy } from '../kube/conversion.js'
import type { ManifestCrd, ManifestResource } from './manifests.js'
import { reasonsOf, type DropVerdict } from './drop-verdict.js'

/** What a CRD's custom resources in the manifests must not be written at. */
export interface VersionGate {
  crd: string
  group: string
  kind: string
  /** Versions going away. */
  dropped: readonly string[]
  /** The versions of the CRD about to be applied (a manifest CRD): a resource at any other fails to apply too. */
  listed?: readonly string[]
  /** Where `--fix` moves a resource: the storage version of the CRD about to be applied, else the cluster's. */
  storageVersion: string | undefined
  conversion: 'None' | 'Webhook'
}

/** A resource that fails to apply once its version is gone. */
export interface BlockingResource extends ManifestResource {
  crd: string
  version: string
  /** dropped: its version goes; unlisted: the CRD about to be applied does not list it. */
  cause: 'dropped' | 'unlisted'
}

/** group and version of an apiVersion (`example.com/v1`); the core group has no slash. */
export function splitApiVersion(apiVersion: string): { group: string; version: string } {
  const slash = apiVersion.lastIndexOf('/')
  return slash < 0 ? { group: '', version: apiVersion } : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1) }
}

/** The resources written at a version their gate says goes (or that the CRD about to be applied does not list), in file order. */
export function blockingResources(resources: readonly ManifestResource[], gates: readonly VersionGate[]): BlockingResource[] {
  const out: BlockingResource[] = []
  for (const r of resources) {
    const { group, version } = splitApiVersion(r.apiVersion)
    const gate = gates.find((g) => g.group === group && g.kind === r.kind)
    if (!gate) continue
    if (gate.dropped.includes(version)) out.push({ ...r, crd: gate.crd, version, cause: 'dropped' })
    else if (gate.listed && !gate.listed.includes(version)) out.push({ ...r, crd: gate.crd, version, cause: 'unlisted' })
  }
  return out
}

/** The gate of a manifest CRD, with the cluster's CRD when there is one. */
export function manifestGate(m: ManifestCrd, dropped: readonly string[], live: CustomResourceDefinition | undefined): VersionGate {
  return {
    crd: m.name,
    group: m.group,
    kind: m.kind || live?.spec.names.kind || '',
    dropped,
    listed: m.versions,
    storageVersion: m.storage ?? storageOf(live),
    conversion: m.conversion,
  }
}

/** The gate of a cluster CRD (no manifest of it): `--drop`'s version goes. */
export function clusterGate(crd: CustomResourceDefinition, dropped: readonly string[]): VersionGate {
  return {
    crd: crd.metadata.name,
    group: crd.spec.group,
    kind: crd.spec.names.kind,
    dropped,
    storageVersion: storageOf(crd),
    conversion: conversionStrategy(crd) === 'Webhook' ? 'Webhook' : 'None',
  }
}

const storageOf = (crd: CustomResourceDefinition | undefined) => crd?.spec.versions.find((v) => v.storage)?.name

/**
 * For `--drop`: the cluster's CRDs of resources at `group/<drop>` no manifest CRD covers, found
 * via discovery (kind to plural); a kind that is not a custom resource has no CRD: left out.
 */
export async function crdsOfResources(
  http: KubeHttp,
  resources: readonly ManifestResource[],
  drop: string,
  known: readonly { group: string; kind: string }[],
): Promise<CustomResourceDefinition[]> {
  const wanted = new Map<string, { group: string; kind: string }>()
  for (const r of resources) {
    const { group, version } = splitApiVersion(r.apiVersion)
    if (version !== drop || group === '' || known.some((k) => k.group === group && k.kind === r.kind)) continue
    wanted.set(`${r.kind}.${group}`, { group, kind: r.kind })
  }
  const found = new Map<string, CustomResourceDefinition>()
  const plurals = new Map<string, Map<string, string>>()
  for (const { group, kind } of wanted.values()) {
    if (!plurals.has(group)) plurals.set(group, await kindsOfGroup(http, group))
    const plural = plurals.get(group)!.get(kind)
    if (!plural) continue
    const crd = await unlessNotFound(getCrd(http, `${plural}.${group}`))
    if (crd) found.set(crd.metadata.name, crd)
  }
  return [...found.values()]
}

/** kind to plural for every resource a group serves (any of its versions: the kind is the same). */
async function kindsOfGroup(http: KubeHttp, group: string): Promise<Map<string, string>> {
  const kinds = new Map<string, string>()
  const doc = await apiGroup(http, group)
  for (const v of doc?.versions ?? []) {
    for (const r of (await groupVersionResources(http, group, v.version)).resources ?? []) {
      const kind = (r as { kind?: string }).kind
      if (kind && !r.name.includes('/') && !kinds.has(kind)) kinds.set(kind, r.name)
    }
  }
  return kinds
}

/** "file [i] Kind ns/name" of a resource, for people. */
export function describeResource(r: ManifestResource): string {
  const name = r.name === undefined ? '(no name)' : r.namespace ? `${r.namespace}/${r.name}` : r.name
  return `${r.file} [${r.documentIndex}]${(r.itemPath ?? []).map((i) => `.items[${i}]`).join('')} ${r.kind} ${name}`
}

/** Where a resource is within its file: its document, and its place in a list document's items. */
export interface Place {
  documentIndex: number
  itemPath?: readonly number[] | undefined
}

export function placeKey(r: Place): string {
  return [r.documentIndex, ...(r.itemPath ?? [])].join('.')
}

const LISTED = 10

/**
 * Adds a blocking `manifests` reason per CRD and version the resources block: to that verdict,
 * or to one of its own (a version the check did not otherwise look at).
 */
export function withResourceReasons(results: readonly DropVerdict[], blocking: readonly BlockingResource[]): DropVerdict[] {
  const out = results.map((r) => ({ ...r, reasons: [...r.reasons] }))
  const groups = new Map<string, BlockingResource[]>()
  for (const b of blocking) groups.set(`${b.crd} ${b.version}`, [...(groups.get(`${b.crd} ${b.version}`) ?? []), b])
  for (const list of groups.values()) {
    const first = list[0]!
    const how =
      first.cause === 'dropped'
        ? `written at ${first.apiVersion} and fail to apply once ${first.version} is gone`
        : `written at ${first.apiVersion}, which the CRD in the manifests does not list`
    const names = list.slice(0, LISTED).map(describeResource).join('; ')
    const more = list.length > LISTED ? `; and ${list.length - LISTED} more` : ''
    const reason = reasonsOf('manifests').blocks(
      `${list.length} custom resource(s) in the manifests are ${how}: ${names}${more} (--fix moves them to the storage version)`,
    )
    const verdict = out.find((v) => v.crd === first.crd && v.version === first.version)
    if (verdict) {
      verdict.safe = false
      verdict.reasons.push(reason)
    } else out.push({ crd: first.crd, version: first.version, safe: false, reasons: [reason] })
  }
  return out
}
