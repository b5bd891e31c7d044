/**
 * The run's lossless check as a pre-flight affords it (`plan`, `check --drop`): all of a
 * conversion-None CRD, the first page of a webhook one; in the run's words, so they agree.
 */
import { unlessForbidden } from '../../kube/api-errors.js'
import { conversionStrategy } from '../../kube/conversion.js'
import type { KubeHttp } from '../../kube/http.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import type { MigrationSettings } from '../context.js'
import { runClient } from '../engine/run-client.js'
import { acceptHint, acceptUncheckedHint, checkLossless, describeRefusedChanges, refusesRewrite } from './check.js'
import { losslessLines } from './report-text.js'
import type { LosslessReport } from './verdict.js'

/** `complete` false: the first page only (a webhook-converted CRD). */
export interface LosslessPreflight extends Pick<LosslessReport, 'checked' | 'complete' | 'lossy' | 'unchecked'> {
  /** The run would stop Blocked (CRDM_DATA_LOSS). */
  refuses: boolean
  /** The report as the CLI prints it (patterns, counts, verdicts, objects, the accept flags). */
  lines: string[]
  /** One sentence: what would stop the run and what accepts it; undefined when nothing does. */
  refusal?: string
}

/** Undefined when the check is off, or RBAC forbids its reads. */
export async function preflightLossless(
  http: KubeHttp,
  crd: CustomResourceDefinition,
  storageVersion: string,
  settings: MigrationSettings,
  signal?: AbortSignal,
): Promise<LosslessPreflight | undefined> {
  if (settings.losslessCheck === false) return undefined
  const name = crd.metadata.name
  const report = await unlessForbidden(
    checkLossless(crd, storageVersion, {
      ...settings,
      client: runClient({ http, signal }, settings),
      ...(conversionStrategy(crd) === 'Webhook' ? { maxPages: 1 } : {}),
    }),
  )
  if (!report) return undefined
  const refuses = refusesRewrite(report)
  const refusal = !refuses
    ? undefined
    : report.lossy > 0
      ? `${report.lossy} object(s) would change: ${describeRefusedChanges(report.changes)}; accept on purpose with ${acceptHint(name, report.changes)}`
      : `${report.uncheckedReason ?? `${report.unchecked} object(s) cannot be checked`}; accept on purpose with ${acceptUncheckedHint(name)}`
  const { checked, complete, lossy, unchecked } = report
  return { refuses, checked, complete, lossy, unchecked, lines: losslessLines(name, report), ...(refusal ? { refusal } : {}) }
}
