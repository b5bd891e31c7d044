import type { Logger } from 'pino'
/**
 * `crd-migrator check [CRD...] --drop VERSION` and `check --manifests PATH...`: is it safe
 * to remove a version from these CRDs? One verdict per CRD and version, with its reasons
 * (src/check/drop-verdict.ts), for people or as data, and an exit code for pipelines.
 */
import type { Config } from '../config/schema.js'
import { ConfigError } from '../errors.js'
import { commandHttp } from './command-http.js'
import type { KubeHttp } from '../kube/http.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import { crdsByName, managedCrds } from '../check/select.js'
import { EvidenceReader } from '../check/drop-evidence.js'
import { decideDrop, droppedVersions, type DropVerdict } from '../check/drop-verdict.js'
import { readCrdManifests } from '../check/manifests.js'
import { isData, renderData, type OutputFormat } from './output.js'
import type { ClientFlags } from './client-flags.js'

/** The exit code when some version is not safe to drop (0: every one is; 1: a request or lookup failed; 2: usage). */
export const EXIT_NOT_SAFE = 3

export interface CheckCommandOptions {
  /** Where the client says it retries a server that never answered (--connect-attempts). */
  logger?: Logger
  format: OutputFormat
  /** CRDs to check, managed or not; every managed one when empty (and no manifests). */
  names: readonly string[]
  /** The version to drop; without it, each manifest CRD's versions the manifest no longer lists. */
  drop?: string | undefined
  /** Files or directories of CRD manifests about to be applied. */
  manifests?: readonly string[] | undefined
  /** A check that could not be made (forbidden, not deprecated) answers no. */
  strict?: boolean
  /** --request-timeout, --as. */
  client?: ClientFlags
  signal?: AbortSignal
}

/** What `-o json|yaml` prints. */
export interface CheckReport {
  safe: boolean
  results: DropVerdict[]
  /** Named CRDs that do not exist. */
  missing: string[]
}

/** A CRD and the versions to check on it; no CRD: not in the cluster. */
interface Target {
  name: string
  crd: CustomResourceDefinition | undefined
  versions: string[]
  /** Why there is nothing to check, when versions is empty. */
  nothing?: string
}

export function checkUsage(options: Pick<CheckCommandOptions, 'names' | 'drop' | 'manifests'>): void {
  const manifests = options.manifests ?? []
  if (options.drop === undefined && manifests.length === 0)
    throw new ConfigError('check: say which version goes: --drop VERSION, or --manifests PATH (the versions its CRDs no longer list)')
  if (options.drop === '') throw new ConfigError('check: --drop needs a version name')
  if (manifests.length > 0 && options.names.length > 0)
    throw new ConfigError('check: name CRDs or give --manifests, not both (the manifests name the CRDs)')
}

export async function runCheckCommand(config: Config, out: NodeJS.WritableStream, options: CheckCommandOptions): Promise<number> {
  checkUsage(options)
  // Manifests are read before the cluster is asked: a bad file is a usage error, whatever the cluster.
  const manifests = options.manifests?.length ? readCrdManifests(options.manifests) : undefined
  const http = commandHttp(config, 'check', options.logger, options.client)
  try {
    const { targets, missing } = manifests
      ? await manifestTargets(http, manifests, options.drop)
      : await clusterTargets(http, config, options.names, options.drop!)
    const reader = new EvidenceReader(http, config, options.signal)
    const results: DropVerdict[] = []
    for (const target of targets) {
      if (!target.crd || target.versions.length === 0) {
        results.push({
          crd: target.name,
          version: options.drop,
          safe: true,
          reasons: [{ check: 'defined', status: 'ok', message: target.nothing! }],
        })
        continue
      }
      for (const version of target.versions) results.push(decideDrop(await reader.gather(target.crd, version), { strict: options.strict }))
    }
    const report: CheckReport = { safe: results.every((r) => r.safe) && missing.length === 0, results, missing }
    out.write(isData(options.format) ? renderData(report, options.format) : formatCheck(report, targets.length === 0 && !manifests))
    for (const name of missing) process.stderr.write(`crd-migrator: customresourcedefinition "${name}" not found\n`)
    if (missing.length) return 1
    return results.every((r) => r.safe) ? 0 : EXIT_NOT_SAFE
  } finally {
    http.close()
  }
}

/** The named CRDs (managed or not), else every managed one; each with the version to drop. */
async function clusterTargets(
  http: KubeHttp,
  config: Config,
  names: readonly string[],
  drop: string,
): Promise<{ targets: Target[]; missing: string[] }> {
  const { crds, missing } = names.length
    ? await crdsByName(http, names)
    : { crds: await managedCrds(http, config.migrator.selector), missing: [] }
  return { targets: crds.map((crd) => ({ name: crd.metadata.name, crd, versions: [drop] })), missing }
}

/** The manifests' CRDs as the cluster has them, with the versions dropped: `drop`, or those the manifest no longer lists. */
async function manifestTargets(
  http: KubeHttp,
  manifests: ReturnType<typeof readCrdManifests>,
  drop: string | undefined,
): Promise<{ targets: Target[]; missing: string[] }> {
  const live = new Map(
    (
      await crdsByName(
        http,
        manifests.map((m) => m.name),
      )
    ).crds.map((crd) => [crd.metadata.name, crd]),
  )
  const targets = manifests.map((m): Target => {
    const crd = live.get(m.name)
    if (!crd) return { name: m.name, crd, versions: [], nothing: `not in the cluster: nothing is stored yet (${m.file})` }
    const versions =
      drop !== undefined
        ? [drop]
        : droppedVersions(
            crd.spec.versions.map((v) => v.name),
            m.versions,
          )
    return { name: m.name, crd, versions, nothing: `${m.file} keeps every version the cluster's CRD has` }
  })
  return { targets, missing: [] }
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
