/**
 * Which requests reach a route, and the answer to those that do not. Registered on the
 * app itself (root-scope.ts), so it holds for every route and for the 404s:
 * - only application/json is an AdmissionReview: other media types are answered 415
 *   before any handler runs;
 * - a body over the limit is 413 (the app's bodyLimit), one nested or sized past the JSON
 *   shape limits (limits.ts) is 400 before it is parsed, empty or invalid JSON is 400;
 * - every refusal is a JSON `{ error }` with one warning line, and those of POST
 *   /validate-crd count in crd_migrator_admission_bad_requests_total; anything else that
 *   fails is a 500 that says nothing of why (the log does);
 * - an unknown route is 404.
 */
import type { FastifyError } from 'fastify'
import { CrdMigratorError, errorMessage } from '../../errors.js'
import { checkJsonShape, jsonShapeLimits, LOG_MESSAGE_MAX, truncateForLog, type JsonShapeViolation } from '../limits.js'
import type { WebhookMetrics } from '../metrics.js'
import { rootScoped } from './root-scope.js'
import { VALIDATE_PATH } from './validate.js'

export interface RequestsPluginOptions {
  /** The app's bodyLimit: the JSON shape limits follow from it, and the 413 names it. */
  bodyLimit: number
  metrics: WebhookMetrics
}

export const requestsPlugin = rootScoped<RequestsPluginOptions>(async function requestsPlugin(app, options) {
  const { bodyLimit, metrics } = options
  const shapeLimits = jsonShapeLimits(bodyLimit)

  // Only application/json is an AdmissionReview: with no other parser Fastify answers
  // every other media type with 415 before the handler runs. Our own JSON parser keeps
  // the parser's reason (Fastify's says only "not valid JSON"); plain JSON.parse is safe
  // here because parsed bodies are only read, never merged into other objects. JSON.parse
  // cannot be interrupted, so the body's nesting and number of objects/arrays are checked
  // first, by a linear scan (limits.ts): a hostile body must not hold the event loop.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => {
    const violation = checkJsonShape(body as Buffer, shapeLimits)
    if (violation) return done(badRequest(describeShapeViolation(violation)), undefined)
    const text = (body as Buffer).toString('utf8')
    if (text.trim() === '') return done(badRequest('body is empty; expected an AdmissionReview as JSON'), undefined)
    try {
      done(null, JSON.parse(text))
    } catch (err) {
      done(badRequest(`body is not valid JSON: ${truncateForLog(errorMessage(err), LOG_MESSAGE_MAX)}`), undefined)
    }
  })

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const status = error.statusCode ?? 500
    if (status >= 500 || status < 400) {
      request.log.error({ err: error }, 'unhandled error')
      return reply.code(500).send({ error: 'internal server error' })
    }
    const message = describeHttpError(error, request.headers['content-type'], bodyLimit)
    if (request.url.startsWith(VALIDATE_PATH)) metrics.countBadRequest(status)
    request.log.warn({ status, error: truncateForLog(message, LOG_MESSAGE_MAX), url: truncateForLog(request.url) }, 'bad request')
    return reply.code(status).send({ error: message })
  })

  app.setNotFoundHandler((request, reply) => reply.code(404).send({ error: `no route for ${request.method} ${request.url}` }))
})

function badRequest(message: string): FastifyError {
  return Object.assign(new CrdMigratorError('CRDM_REVIEW_MALFORMED', message), { statusCode: 400 })
}

function describeShapeViolation(violation: JsonShapeViolation): string {
  return violation.limit === 'depth'
    ? `body nests JSON objects and arrays deeper than ${violation.max} levels, the limit; refused before parsing`
    : `body holds more than ${violation.max} JSON objects and arrays, the limit; refused before parsing`
}

function describeHttpError(error: FastifyError, contentType: string | undefined, bodyLimit: number): string {
  switch (error.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return `content-type must be application/json, got ${contentType ? JSON.stringify(contentType) : 'none'}`
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return `request body exceeds the limit of ${bodyLimit} bytes`
    default:
      return error.message
  }
}
