/** `check --drop VERSION` / `check --manifests PATH...`: is it safe to remove a version? A verdict per CRD and version, and an exit code. */
import type { Config } from '../../config/schema.js'
import { preflightLossless } from '../../migrator/lossless/preflight.js'
import { settingsFor } from '../../migrator/crd-settings.js'
import { planCrd } from '../../migrator/plan.js'
import { ConfigError } from '../../errors.js'
import { closing, commandHttp } from '../command-http.js'
import type { KubeHttp } from '../../kube/http.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { crdsByName, namedOrManagedCrds } from '../../select/managed-crds.js'
import { EvidenceReader } from '../../check/drop-evidence.js'
import { decideDrop, droppedVersions, reasonsOf, type DropVerdict, type Reason } from '../../check/drop-verdict.js'
import { readManifests, type Manifests, type SkippedFile } from '../../check/manifests.js'
import {
  blockingResources,
  clusterGate,
  crdsOfResources,
  manifestGate,
  placeKey,
  withResourceReasons,
  type BlockingResource,
  type VersionGate,
} from '../../check/manifest-resources.js'
import { applyFixes, formatFixes, planFixes, type FixOutcome } from '../../check/manifest-fix.js'
import { isData, renderData, reportMissing } from '../output.js'
import type { ReadCommandOptions } from '../command-kit.js'

/** The exit code when some version is not safe to drop (0: every one is; 1: a request or lookup failed; 2: usage). */
export const EXIT_NOT_SAFE = 3

export interface CheckCommandOptions extends ReadCommandOptions {
  /** CRDs to check, managed or not; every managed one when empty (and no manifests). */
  names: readonly string[]
  /** The version to drop; without it, each manifest CRD's versions the manifest no longer lists. */
  drop?: string | undefined
  /** Files or directories of CRD manifests about to be applied. */
  manifests?: readonly string[] | undefined
  /** A check that could not be made (forbidden, not deprecated) answers no. */
  strict?: boolean
  /** --fix: move the manifests' custom resources at a dropped version to the storage version. */
  fix?: boolean
  /** With fix: say what would change, write nothing. */
  dryRun?: boolean
  /** A selection that matches no CRD is not an error (exit 0). */
  allowEmpty?: boolean
}

/** What `-o json|yaml` prints. */
export interface CheckReport {
  safe: boolean
  results: DropVerdict[]
  /** Named CRDs that do not exist. */
  missing: string[]
  /** --manifests: custom resources that fail to apply once their version is gone (after --fix, those it did not move). */
  resources?: BlockingResource[]
  /** --fix: what was rewritten (with --dry-run: would be), or refused and why. */
  fixes?: FixOutcome[]
  /** --manifests: files not read (templates). */
  skipped?: SkippedFile[]
}

/** A CRD and the versions to check on it; no CRD: not in the cluster. */
interface Target {
  name: string
  crd: CustomResourceDefinition | undefined
  versions: string[]
  /** Why there is nothing to check, when versions is empty. */
  nothing?: string
}

export function checkUsage(options: Pick<CheckCommandOptions, 'names' | 'drop' | 'manifests' | 'fix' | 'dryRun'>): void {
  const manifests = options.manifests ?? []
  if (options.drop === undefined && manifests.length === 0)
    throw new ConfigError('check: say which version goes: --drop VERSION, or --manifests PATH (the versions its CRDs no longer list)')
  if (options.drop === '') throw new ConfigError('check: --drop needs a version name')
  if (manifests.length > 0 && options.names.length > 0)
    throw new ConfigError('check: name CRDs or give --manifests, not both (the manifests name the CRDs)')
  if (options.fix && manifests.length === 0) throw new ConfigError('check: --fix rewrites manifests: give --manifests PATH')
  if (options.dryRun && !options.fix) throw new ConfigError('check: --dry-run goes with --fix (check itself writes nothing)')
}

export async function runCheckCommand(config: Config, out: NodeJS.WritableStream, options: CheckCommandOptions): Promise<number> {
  checkUsage(options)
  // Manifests are read before the cluster is asked: a bad file is a usage error, whatever the cluster.
  const manifests = options.manifests?.length ? readManifests(options.manifests, options.drop !== undefined) : undefined
  return closing(commandHttp(config, 'check', options.logger, options.client), async (http) => {
    const { targets, missing, gates } = manifests
      ? await manifestTargets(http, manifests, options.drop)
      : { ...(await clusterTargets(http, config, options.names, options.drop!)), gates: [] }
    const reader = new EvidenceReader(http, config, options.signal)
    const results: DropVerdict[] = []
    for (const target of targets) {
      if (!target.crd || target.versions.length === 0) {
        results.push({ crd: target.name, version: options.drop, safe: true, reasons: [reasonsOf('defined').ok(target.nothing!)] })
        continue
      }
      for (const version of target.versions) {
        const verdict = decideDrop(await reader.gather(target.crd, version), { strict: options.strict })
        results.push(await withLosslessReason(http, config, target.crd, version, verdict, options.signal))
      }
    }
    const { blocking, fixes, patch } = manifests
      ? await resourcesAfterFix(manifests, gates, options)
      : { blocking: [], fixes: undefined, patch: '' }
    const verdicts = withResourceReasons(results, blocking)
    // A selector that matches nothing (a typo in -l) checked nothing: no green light for a gate.
    const empty = !manifests && options.names.length === 0 && targets.length === 0 && !options.allowEmpty
    const report: CheckReport = {
      safe: verdicts.every((r) => r.safe) && missing.length === 0 && !empty,
      results: verdicts,
      missing,
      ...(manifests ? { resources: blocking, skipped: manifests.skipped } : {}),
      ...(fixes ? { fixes } : {}),
    }
    if (!isData(options.format)) {
      // --fix --dry-run: stdout is the patch alone (git apply takes it); the rest goes to stderr.
      const notes = options.dryRun ? process.stderr : out
      if (patch) out.write(patch)
      if (fixes) notes.write(`${patch && !options.dryRun ? '\n' : ''}${formatFixes(fixes, options.dryRun === true)}\n`)
      for (const s of manifests?.skipped ?? []) notes.write(`skipped ${s.file}: ${s.reason}\n`)
      notes.write(formatCheck(report, options.names.length === 0 && !manifests))
    } else out.write(renderData(report, options.format))
    if (reportMissing(missing)) return 1
    if (empty) {
      process.stderr.write(
        `crd-migrator: no managed CRD matched ${describeSelection(config)}: nothing was checked, so nothing is shown safe (--allow-empty accepts an empty selection)\n`,
      )
      return 1
    }
    return verdicts.every((r) => r.safe) ? 0 : EXIT_NOT_SAFE
  })
}

/**
 * While storedVersions lists the version, narrowing it needs the run's lossless pre-flight to
 * pass: a CRD the run would refuse is not safe, with the run's reason.
 */
async function withLosslessReason(
  http: KubeHttp,
  config: Config,
  crd: CustomResourceDefinition,
  version: string,
  verdict: DropVerdict,
  signal?: AbortSignal,
): Promise<DropVerdict> {
  const plan = planCrd(crd)
  if (!plan.storageVersion || plan.blockedReason || version === plan.storageVersion || !plan.storedVersions.includes(version))
    return verdict
  const pre = await preflightLossless(http, crd, plan.storageVersion, settingsFor(config, crd.metadata.name), signal)
  if (!pre) return verdict
  const scope = pre.complete ? `${pre.checked} object read(s) checked` : `the first ${pre.checked} object read(s) checked`
  const reason: Reason = pre.refuses
    ? { check: 'lossless', status: 'blocks', message: `the migration would stop Blocked (CRDM_DATA_LOSS): ${pre.refusal}` }
    : { check: 'lossless', status: 'ok', message: `the migration's lossless check passes (${scope})` }
  return { ...verdict, safe: verdict.safe && !pre.refuses, reasons: [...verdict.reasons, reason] }
}

/** How the managed CRDs were selected, for the message when none matched. */
function describeSelection(config: Config): string {
  const { labelSelector, names } = config.migrator.selector
  const parts = [
    ...(labelSelector.trim() ? [`-l ${JSON.stringify(labelSelector)}`] : []),
    ...(names.length ? [`the names ${names.join(', ')}`] : []),
  ]
  return parts.length ? parts.join(' or ') : 'an empty selection (no label selector, no names)'
}

/** The named CRDs (managed or not), else every managed one; each with the version to drop. */
async function clusterTargets(
  http: KubeHttp,
  config: Config,
  names: readonly string[],
  drop: string,
): Promise<{ targets: Target[]; missing: string[] }> {
  const { crds, missing } = await namedOrManagedCrds(http, config.migrator.selector, names)
  return { targets: crds.map((crd) => ({ name: crd.metadata.name, crd, versions: [drop] })), missing }
}

/**
 * The manifests' CRDs as the cluster has them, with the versions dropped (`drop`, or those the
 * manifest no longer lists); with `drop`, also the CRDs of the manifests' custom resources at
 * that version. Each with the gate its manifests' custom resources must pass.
 */
async function manifestTargets(
  http: KubeHttp,
  manifests: Manifests,
  drop: string | undefined,
): Promise<{ targets: Target[]; missing: string[]; gates: VersionGate[] }> {
  const names = manifests.crds.map((m) => m.name)
  const live = new Map((await crdsByName(http, names)).crds.map((crd) => [crd.metadata.name, crd]))
  const gates: VersionGate[] = []
  const targets = manifests.crds.map((m): Target => {
    const crd = live.get(m.name)
    const inCluster = crd?.spec.versions.map((v) => v.name) ?? []
    const versions = !crd ? [] : drop !== undefined ? [drop] : droppedVersions(inCluster, m.versions)
    gates.push(manifestGate(m, versions, crd))
    if (!crd) return { name: m.name, crd, versions, nothing: `not in the cluster: nothing is stored yet (${m.file})` }
    return { name: m.name, crd, versions, nothing: `${m.file} keeps every version the cluster's CRD has` }
  })
  if (drop !== undefined) {
    for (const crd of await crdsOfResources(http, manifests.resources, drop, gates)) {
      targets.push({ name: crd.metadata.name, crd, versions: [drop] })
      gates.push(clusterGate(crd, [drop]))
    }
  }
  return { targets, missing: [], gates }
}

/** The manifests' custom resources at a dropped version; with --fix, those it did not move (all of them with --dry-run). */
async function resourcesAfterFix(
  manifests: Manifests,
  gates: readonly VersionGate[],
  options: Pick<CheckCommandOptions, 'fix' | 'dryRun'>,
): Promise<{ blocking: BlockingResource[]; fixes: FixOutcome[] | undefined; patch: string }> {
  const blocking = blockingResources(manifests.resources, gates)
  if (!options.fix) return { blocking, fixes: undefined, patch: '' }
  const { outcomes: fixes, patch } = await applyFixes(planFixes(blocking, gates), options.dryRun === true)
  const moved = (b: BlockingResource) => fixes.some((f) => f.status === 'fixed' && f.file === b.file && placeKey(f) === placeKey(b))
  return { blocking: blocking.filter((b) => !moved(b)), fixes, patch }
}

const MARK = { blocks: 'no', ok: 'ok', unknown: '??' } as const

/** One block per CRD and version: the answer, then each reason, blocking ones first. */
export function formatCheck(report: CheckReport, noneSelected: boolean): string {
  if (report.results.length === 0) return noneSelected ? 'no managed CRDs (see --selector / --crds)\n' : ''
  const order = { blocks: 0, unknown: 1, ok: 2 } as const
  const width = Math.max(...report.results.flatMap((r) => r.reasons.map((x) => x.check.length)))
  const blocks = report.results.map((r) => {
    const head = `${r.crd}${r.version ? `: drop ${r.version}?` : ':'} ${r.safe ? 'yes' : 'NO'}`
    const reasons = [...r.reasons]
      .sort((a, b) => order[a.status] - order[b.status])
      .map((x) => `  ${MARK[x.status]}  ${x.check.padEnd(width)}  ${x.message}`)
    return [head, ...reasons].join('\n')
  })
  const unsafe = report.results.filter((r) => !r.safe).length
  const summary = unsafe === 0 ? `safe: ${report.results.length} checked` : `not safe: ${unsafe} of ${report.results.length}`
  return `${blocks.join('\n\n')}\n\n${summary}\n`
}
