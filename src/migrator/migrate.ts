/**
 * One migration of one CRD, read top to bottom like a reconcile: decide, preflight,
 * freeze, the phases, unfreeze. Deciding reads and never freezes (decide.ts); each phase
 * has one shape (phases/run-phases.ts); what people see of it is the reporter's
 * (reporter.ts); the freeze and its lifting are run.ts's. The unfreeze runs whatever
 * happened before it.
 */
import { getNamedCrd } from '../kube/crds.js'
import { conversionWebhookOf } from '../kube/conversion.js'
import { forbiddenToMigrate } from './access-preflight.js'
import { runContext, startingResult, type MigrationContext, type MigrationResult, type MigrationSettings } from './context.js'
import { preflightConversion } from './conversion/webhook-preflight.js'
import { decideRun } from './decide.js'
import { cleanupPhase, stashPhase, storagePhase, storedVersionsPhase, workBeforeFreeze } from './phases/run-phases.js'
import { DataLossError, proveLossless } from './lossless/check.js'
import type { LosslessReport } from './lossless/verdict.js'
import { planCrd } from './plan.js'
import { summarize } from './report.js'
import { RunReporter } from './reporter.js'
import { beginRun, endRun, lostFreeze } from './run.js'

export type { MigrationContext, MigrationOutcome, MigrationResult, MigrationSettings, SkipReason } from './context.js'

export async function migrateCrd(name: string, settings: MigrationSettings, caller: MigrationContext): Promise<MigrationResult> {
  const started = Date.now()
  const ctx = runContext(caller, settings)
  const report = new RunReporter(name, ctx)
  const crd = await getNamedCrd(ctx.client, name)
  const crdPlan = planCrd(crd)
  const base = startingResult(name, crd, crdPlan)
  const took = () => Date.now() - started

  // Decide, before touching anything.
  const plan = await decideRun(crd, crdPlan, settings, ctx)
  if ('skip' in plan) return report.skipped({ ...base, reason: plan.reason, skipReason: plan.skip, durationMs: took() })
  // Nothing to freeze for: a new run without a storage phase counts its work first.
  const idle = plan.verdict.action === 'freeze' && !plan.runStorage ? await workBeforeFreeze(crd, plan, settings, ctx) : undefined
  if (idle) return report.skipped({ ...base, reason: idle, skipReason: 'up-to-date', durationMs: took() })
  // The migrator's own RBAC on the objects, before freezing anything (access-preflight.ts).
  const denied = await forbiddenToMigrate(crd, plan, settings, ctx)
  if (denied) return report.forbidden(crd, { ...base, outcome: 'Failed', errorCode: 'CRDM_FORBIDDEN', reason: denied, durationMs: took() })

  // A webhook-converted CRD: prove its webhook converts before freezing anything.
  const webhook = conversionWebhookOf(crd)
  const preflight = webhook ? await preflightConversion(ctx.client, crd, plan.storageVersion) : undefined
  if (webhook && preflight && !preflight.ok) {
    const reason = `conversion webhook ${webhook} does not answer: ${preflight.detail}`
    const blocked: MigrationResult = { ...base, outcome: 'Blocked', errorCode: 'CRDM_CONVERSION_OUTAGE', reason, durationMs: took() }
    return report.blocked(crd, blocked, webhook, preflight.detail)
  }

  // Objects whose rewrite would not keep their content: the first page, before freezing
  // (the common case, a field every object loses, never freezes); all of them in the run.
  let firstLossless: LosslessReport | undefined
  if (plan.runStorage) {
    try {
      firstLossless = await proveLossless(crd, plan.storageVersion, settings, ctx, { maxPages: 1 })
    } catch (err) {
      if (!(err instanceof DataLossError)) throw err
      const blocked: MigrationResult = {
        ...base,
        outcome: 'Blocked',
        errorCode: err.code,
        reason: err.message,
        lossless: err.report,
        durationMs: took(),
      }
      return report.refused(crd, blocked)
    }
  }

  const run = await beginRun(crd, crdPlan, plan, settings, ctx, report, base, started)
  run.checkedBeforeFreeze = firstLossless
  try {
    if (plan.runStorage) await storagePhase(run)
    if (plan.stashRules.length > 0) await stashPhase(run)
    if (plan.runStorage) await storedVersionsPhase(run)
    if (plan.runCleanup) await cleanupPhase(run)
    run.result.outcome = 'Succeeded'
    run.result.reason = summarize(run.result)
  } catch (err) {
    report.failed(run.result, err, ctx.signal, lostFreeze(run, err))
  }
  const after = await endRun(run, ctx)
  return report.finished(run.result, after)
}
