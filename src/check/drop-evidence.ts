/**
 * What the API server tells about a version to be dropped, gathered for drop-verdict.ts. A read
 * RBAC forbids becomes "could not tell"; any other failure is an error.
 */
import type { Config } from '../config/schema.js'
import { CrdMigratorError, errorCode } from '../errors.js'
import { isForbidden, unlessForbidden } from '../kube/api-errors.js'
import type { KubeHttp } from '../kube/http.js'
import { listPages } from '../kube/list-pages.js'
import { collectionPath, listOrderKey, resourceRef } from '../kube/paths.js'
import { resolveResource } from '../kube/resources.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import { runClient, type RunClient } from '../migrator/engine/run-client.js'
import { planCrd } from '../migrator/plan.js'
import { resolveStashRules, rulesForGroup, type StashRule } from '../migrator/phases/stashes/rules.js'
import { embeddedOf, type StashObject } from '../migrator/phases/stashes/stash-plan.js'
import { readCrdState, StateAnnotation } from '../state/crd-state.js'
import { requestedDeprecatedApis, wasRequested, type RequestedApi } from './deprecated-requests.js'
import type { ClientEvidence, Counted, DropEvidence, MigratorRecord, StashEvidence } from './drop-verdict.js'

/** Stashes named in a "could not tell" or "blocks" reason, at most. */
const NAMED_STASHES = 5

/** One command's reads: /metrics and each stash source are read once, however many CRDs are checked. */
export class EvidenceReader {
  private metrics: Promise<RequestedApi[] | { unknown: string }> | undefined
  private readonly stashSources = new Map<StashRule, Promise<StashObject[] | { unknown: string }>>()
  private readonly rules: StashRule[]
  /** Lists are retried as a migration's are. */
  private readonly client: RunClient

  constructor(
    private readonly http: KubeHttp,
    private readonly config: Config,
    private readonly signal?: AbortSignal,
  ) {
    this.rules = resolveStashRules(config.migrator.stashPresets, config.migrator.stashes)
    this.client = runClient({ http, signal }, config.migrator)
  }

  async gather(crd: CustomResourceDefinition, version: string): Promise<DropEvidence> {
    const plan = planCrd(crd)
    const spec = crd.spec.versions.find((v) => v.name === version)
    const served = spec?.served ?? false
    const deprecated = spec?.deprecated ?? false
    return {
      crd: crd.metadata.name,
      group: crd.spec.group,
      version,
      defined: spec !== undefined,
      served,
      storage: spec?.storage ?? false,
      deprecated,
      storageVersion: plan.storageVersion,
      storedVersions: plan.storedVersions,
      generation: plan.generation,
      ...(await this.listObjects(crd, version)),
      stashes: await this.stashes(crd, version),
      clients: served && deprecated ? await this.clients({ group: crd.spec.group, version, resource: crd.spec.names.plural }) : undefined,
      migrator: migratorRecord(crd, this.config.annotations.migrating),
    }
  }

  /** Every object's metadata, through a served version (the storage one first): how many, and how many have managedFields at `version`. */
  private async listObjects(crd: CustomResourceDefinition, version: string): Promise<{ objects: Counted; managedFields: Counted }> {
    const neither = (unknown: string) => ({ objects: { unknown }, managedFields: { unknown } })
    const through = servedVersionToList(crd)
    if (through === undefined) return neither('no version is served, so its objects cannot be listed')
    const apiVersion = `${crd.spec.group}/${version}`
    let objects = 0
    let managedFields = 0
    try {
      for await (const page of this.client.listMetadata(resourceRef(crd, through), { pageSize: this.config.migrator.pageSize })) {
        for (const item of page.items) {
          objects++
          if ((item.metadata.managedFields ?? []).some((e) => e.apiVersion === apiVersion)) managedFields++
        }
      }
    } catch (err) {
      if (!isForbidden(err)) throw err
      return neither(`forbidden: may not list ${crd.spec.names.plural}.${crd.spec.group}`)
    }
    return { objects: { count: objects }, managedFields: { count: managedFields } }
  }

  private async stashes(crd: CustomResourceDefinition, version: string): Promise<StashEvidence> {
    const rules = rulesForGroup(this.rules, crd.spec.group)
    if (rules.length === 0) return { rules: 0, atVersion: 0, where: [] }
    let atVersion = 0
    const where: string[] = []
    for (const rule of rules) {
      if (!this.stashSources.has(rule)) this.stashSources.set(rule, this.readStashSource(rule))
      const stashes = await this.stashSources.get(rule)!
      if ('unknown' in stashes) return { rules: rules.length, unknown: stashes.unknown }
      for (const stash of stashes) {
        if (embeddedOf(stash, rule, [crd.spec.names.kind])?.version !== version) continue
        atVersion++
        if (where.length < NAMED_STASHES)
          where.push(`${rule.source.resource} ${listOrderKey(stash.metadata.namespace, stash.metadata.name)}`)
        else if (where.length === NAMED_STASHES) where.push('…')
      }
    }
    return { rules: rules.length, atVersion, where }
  }

  /** The objects a stash rule's source holds; none when its resource is not served. */
  private async readStashSource(rule: StashRule): Promise<StashObject[] | { unknown: string }> {
    const { group, version, resource, labelSelector, namespaces } = rule.source
    const name = `${resource}${group ? `.${group}` : ''}`
    try {
      const ref = await resolveResource(this.http, { group, version, resource })
      const items: StashObject[] = []
      const paths = namespaces.length ? namespaces.map((ns) => collectionPath(ref, ns)) : [collectionPath(ref)]
      for (const path of paths)
        for await (const page of listPages<StashObject>(this.client, path, {
          query: { labelSelector },
          pageSize: 250,
          signal: this.signal,
        }))
          items.push(...page.items)
      return items
    } catch (err) {
      if (isForbidden(err)) return { unknown: `forbidden: may not list ${name}` }
      // The stash source is not served here (no KubeVirt, say): nothing can be stashed in it.
      if (errorCode(err) === 'CRDM_RESOURCE_NOT_FOUND') return []
      throw err
    }
  }

  private async clients(api: RequestedApi): Promise<ClientEvidence> {
    this.metrics ??= this.readMetrics()
    const requested = await this.metrics
    if ('unknown' in requested) return requested
    return { requested: wasRequested(requested, api) }
  }

  private async readMetrics(): Promise<RequestedApi[] | { unknown: string }> {
    const answer = await unlessForbidden(
      this.http.request<unknown>({ method: 'GET', path: '/metrics', accept: 'text/plain', signal: this.signal }),
    )
    if (!answer) return { unknown: 'forbidden: may not get /metrics (nonResourceURLs)' }
    if (typeof answer.body !== 'string')
      throw new CrdMigratorError('CRDM_KUBE_API', 'GET /metrics: the API server answered something other than text')
    return requestedDeprecatedApis(answer.body)
  }
}

/** The version to list objects through: the storage version when served, else the first served one. */
export function servedVersionToList(crd: CustomResourceDefinition): string | undefined {
  const served = crd.spec.versions.filter((v) => v.served)
  return (served.find((v) => v.storage) ?? served[0])?.name
}

function migratorRecord(crd: CustomResourceDefinition, migratingAnnotation: string): MigratorRecord {
  const { frozen, owner, phase, progress, lastResult } = readCrdState(crd, migratingAnnotation)
  const observed = Number(crd.metadata.annotations?.[StateAnnotation.observedGeneration] ?? Number.NaN)
  return { frozen, owner, phase, progress, lastResult, observedGeneration: Number.isInteger(observed) ? observed : undefined }
}
