/** The admission route: an AdmissionReview in (parsed and bounded by requests.ts), rules.ts's decision out, with metric and log line. */
import { performance } from 'node:perf_hooks'
import type { FastifyBaseLogger, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { Logger } from 'pino'
import { isDenialReason, type AdmissionDecision, type AdmissionPolicy } from '../admission.js'
import { LOG_MESSAGE_MAX, truncateForLog, truncateListForLog } from '../limits.js'
import type { WebhookMetrics } from '../metrics.js'
import { crdNameOf } from '../readers.js'
import type { RepeatSampler } from '../repeat-sampler.js'
import { parseAdmissionReview, reviewAdmission, toAdmissionReviewResponse, type AdmissionRequest } from '../review.js'

export const VALIDATE_PATH = '/validate-crd'
/**
 * The entry the API server calls only for requesters allowed to freeze the CRD (configuration.ts). Anyone
 * reaching the port may post here too: harmless, no side effects, and a direct caller could forge any userInfo.
 */
export const VALIDATE_FREEZE_ALLOWED_PATH = `${VALIDATE_PATH}/freeze-allowed`

export interface ValidatePluginOptions {
  policy: AdmissionPolicy
  metrics: WebhookMetrics
  /** The app's logger: a review's line is only built when its level is enabled. */
  logger: Logger
  repeats: RepeatSampler
}

export const validatePlugin: FastifyPluginAsync<ValidatePluginOptions> = async (app, options) => {
  const { policy, metrics, logger, repeats } = options

  const logReview = (log: FastifyBaseLogger, review: AdmissionRequest, decision: AdmissionDecision, seconds: number) => {
    // A plain allowance at debug: most of a busy webhook's answers, in the audit log anyway,
    // and formatting its line cost more than the decision (npm run bench).
    const level = decision.allowed && !decision.warnings ? 'debug' : 'info'
    if (!logger.isLevelEnabled(level)) return
    const crdName = crdNameOf(review)
    const crd = crdName === undefined ? undefined : truncateForLog(crdName)
    const user = truncateForLog(review.userInfo.username)
    // The same refusal of the same user over and over is one line per window (repeat-sampler.ts).
    const leftOut = repeats.admit(`${review.operation}\n${decision.reason}\n${user}\n${crd ?? ''}`)
    if (leftOut === undefined) return
    log[level](
      {
        uid: truncateForLog(review.uid),
        crd,
        user,
        groups: truncateListForLog(review.userInfo.groups),
        operation: review.operation,
        ...(review.subResource ? { subResource: truncateForLog(review.subResource) } : {}),
        dryRun: review.dryRun ?? false,
        decision: decision.allowed ? 'allowed' : 'denied',
        reason: decision.reason,
        ...(decision.message ? { detail: truncateForLog(decision.message, LOG_MESSAGE_MAX) } : {}),
        ...(decision.warnings ? { warnings: truncateListForLog(decision.warnings, undefined, LOG_MESSAGE_MAX) } : {}),
        durationMs: Math.round(seconds * 1e6) / 1e3,
        ...(leftOut > 0 ? { repeatsNotLogged: leftOut } : {}),
      },
      decision.allowed ? 'admission allowed' : 'admission denied',
    )
  }

  // Not async: sent at once instead of through a promise per review; Fastify still catches a throw.
  const route = (freezeAllowed: boolean) => (request: FastifyRequest, reply: FastifyReply) => {
    const started = performance.now()
    const parsed = parseAdmissionReview(request.body)
    if (!parsed.ok) {
      metrics.countBadRequest(400)
      request.log.warn(
        { error: truncateForLog(parsed.error, LOG_MESSAGE_MAX) },
        'rejected request that is not a well-formed AdmissionReview',
      )
      return reply.code(400).send({ error: parsed.error })
    }
    const review = parsed.request
    let decision: AdmissionDecision
    try {
      decision = reviewAdmission(review, policy, freezeAllowed)
    } catch (err) {
      // The decision is total; this is a bug. Fail closed with an answer, not a 500.
      request.log.error({ err, uid: truncateForLog(review.uid) }, 'admission decision threw')
      decision = {
        allowed: false,
        reason: 'internal-error',
        code: 500,
        message: 'crd-migrator webhook failed to evaluate this request and denies it (fail closed); see its logs.',
      }
    }
    const seconds = (performance.now() - started) / 1000
    metrics.observeReview(
      review.operation,
      decision.allowed ? 'allowed' : 'denied',
      seconds,
      isDenialReason(decision.reason) ? decision.reason : undefined,
    )
    logReview(request.log, review, decision, seconds)
    return reply.send(toAdmissionReviewResponse(review.uid, decision))
  }
  app.post(VALIDATE_PATH, route(false))
  app.post(VALIDATE_FREEZE_ALLOWED_PATH, route(true))
}
