// crd-migrator's `helm test` (templates/tests/): run by the chart's own image (Node.js, no
// dependencies), in two Pods, each proving one thing through the API server
// (CRD_MIGRATOR_TEST_PART says which):
//  webhook: as a ServiceAccount of the test's own, which may patch the probe CRD and nothing
//     else: the API server calls the storage-freeze webhook and the webhook judges (a
//     dry-run patch forging a crd-migrator.io/* annotation on the probe CRD must come back
//     refused by the webhook itself, not by RBAC, not "failed calling webhook");
//  access: as the migrator's ServiceAccount itself: it may do what the migrator does, and
//     not what it never does, one SelfSubjectAccessReview per line of checks.json (rendered
//     from the values). SelfSubjectAccessReviews need no grant (system:basic-user), so the
//     test holds no power to ask what anyone else may do.
// It exits 1 if any check fails, printing why. Outside a pod (the chart's tests run it on
// a local API server) the environment says where things are: KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT as in a pod, CRD_MIGRATOR_TEST_CHECKS (checks.json) and
// CRD_MIGRATOR_TEST_SA_DIR (the token and ca.crt).
import { Buffer } from 'node:buffer'
import { readFileSync } from 'node:fs'
import https from 'node:https'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const checksFile = process.env.CRD_MIGRATOR_TEST_CHECKS || join(dirname(fileURLToPath(import.meta.url)), 'checks.json')
const saDir = process.env.CRD_MIGRATOR_TEST_SA_DIR || '/var/run/secrets/kubernetes.io/serviceaccount'
const host = process.env.KUBERNETES_SERVICE_HOST
const port = process.env.KUBERNETES_SERVICE_PORT || '443'
// A fresh RoleBinding takes a moment to reach the API server's authorizer: RBAC refusals of
// the test's own requests are retried this long before they count.
const RBAC_GRACE_MS = Number(process.env.CRD_MIGRATOR_TEST_RBAC_GRACE_MS || 30000)

const part = process.env.CRD_MIGRATOR_TEST_PART

if (!host) fail('KUBERNETES_SERVICE_HOST is not set: run this in a pod, or set it to the API server address')
if (part !== 'webhook' && part !== 'access') fail(`CRD_MIGRATOR_TEST_PART must be webhook or access, not ${JSON.stringify(part)}`)
const checks = JSON.parse(readFileSync(checksFile, 'utf8'))
const token = readFileSync(join(saDir, 'token'), 'utf8').trim()
const ca = readFileSync(join(saDir, 'ca.crt'))

/** One request to the API server as this pod's ServiceAccount; never throws on an HTTP status. */
function request(method, path, body, contentType = 'application/json') {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host,
        port,
        path,
        method,
        ca,
        timeout: 30000,
        headers: {
          Authorization: `Bearer ${token}`,
          Accept: 'application/json',
          ...(payload ? { 'Content-Type': contentType, 'Content-Length': payload.length } : {}),
        },
      },
      (res) => {
        const chunks = []
        res.on('data', (c) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          let json
          try {
            json = JSON.parse(text)
          } catch {
            json = undefined
          }
          resolve({ status: res.statusCode ?? 0, text, json })
        })
      },
    )
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer in 30 s`)))
    req.on('error', reject)
    req.end(payload)
  })
}

const messageOf = (res) => (res.json && typeof res.json.message === 'string' ? res.json.message : res.text.slice(0, 500))
const webhookDenial = (name) => `admission webhook "${name}" denied the request`
/** A 403 from RBAC (the test's own permission), not from the webhook. */
const rbacRefusal = (res, name) => res.status === 403 && !messageOf(res).includes(webhookDenial(name ?? ''))

/** The request, retried while RBAC refuses it within the grace period. */
async function withRbacGrace(send, webhookName) {
  const deadline = Date.now() + RBAC_GRACE_MS
  for (;;) {
    const res = await send()
    if (!rbacRefusal(res, webhookName) || Date.now() >= deadline) return res
    await new Promise((r) => setTimeout(r, 1000))
  }
}

const results = []
function report(ok, what, detail) {
  results.push(ok)
  console.log(`${ok ? 'ok  ' : 'FAIL'}  ${what}${detail ? `\n      ${detail}` : ''}`)
  return ok
}
function fail(message) {
  console.error(`crd-migrator helm test: ${message}`)
  process.exit(2)
}

async function checkWebhook({ name, crd, annotation }) {
  const what = `the API server called webhook ${name}, which refused a forged ${annotation} annotation on CRD ${crd}`
  const path = `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${encodeURIComponent(crd)}?dryRun=All`
  const forged = { metadata: { annotations: { [annotation]: `forged-by-helm-test-${Date.now()}` } } }
  const res = await withRbacGrace(() => request('PATCH', path, forged, 'application/merge-patch+json'), name)
  const message = messageOf(res)
  if (res.status === 403 && message.includes(webhookDenial(name))) return report(true, what, message)
  if (res.status >= 200 && res.status < 300)
    return report(
      false,
      what,
      'the dry run was ALLOWED: the API server did not send it to the webhook (is the ValidatingWebhookConfiguration installed, with its matchConditions?)',
    )
  if (/failed calling webhook/.test(message))
    return report(false, what, `the API server could not reach the webhook (Service, endpoints, certificate, NetworkPolicy?): ${message}`)
  if (rbacRefusal(res, name))
    return report(false, what, `the test's own ServiceAccount may not patch ${crd} (the test hook's RBAC): ${message}`)
  return report(false, what, `HTTP ${res.status}: ${message}`)
}

function describe(a) {
  const group = a.group === '*' ? 'every group' : a.group
  const resource =
    a.resource === '*'
      ? `every resource of ${group}`
      : `${a.resource}${a.subresource ? `/${a.subresource}` : ''}${group ? `.${group}` : ''}`
  return `${a.verb} ${resource}${a.name ? ` ${a.name}` : ''}${a.namespace ? ` in ${a.namespace}` : ''}`
}

/** Whether this Pod runs as the subject of the access checks: their answers are about whoever asks. */
async function checkIdentity(subject) {
  const what = `running as ${subject.user}, the migrator's ServiceAccount`
  const res = await request('POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
    apiVersion: 'authentication.k8s.io/v1',
    kind: 'SelfSubjectReview',
  })
  const username = res.json?.status?.userInfo?.username
  if (res.status !== 201 || typeof username !== 'string')
    return report(false, what, `SelfSubjectReview: HTTP ${res.status}: ${messageOf(res)}`)
  return report(username === subject.user, what, username === subject.user ? undefined : `this Pod runs as ${username}`)
}

async function checkAccess(subject, { allowed, what, attributes }) {
  const review = { apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectAccessReview', spec: { resourceAttributes: attributes } }
  const label = `${subject.user} ${allowed ? 'can' : 'cannot'} ${describe(attributes)} (${what})`
  const res = await request('POST', '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', review)
  if (res.status !== 201 || typeof res.json?.status?.allowed !== 'boolean')
    return report(false, label, `SelfSubjectAccessReview: HTTP ${res.status}: ${messageOf(res)}`)
  const got = res.json.status.allowed
  report(
    got === allowed,
    label,
    got === allowed ? undefined : `it ${got ? 'CAN' : 'CANNOT'}${res.json.status.reason ? ` (${res.json.status.reason})` : ''}`,
  )
}

try {
  if (part === 'webhook') await checkWebhook(checks.webhook)
  // Answers about someone else would prove nothing: the access checks only as the migrator.
  else if (await checkIdentity(checks.subject)) for (const check of checks.access) await checkAccess(checks.subject, check)
} catch (err) {
  fail(err instanceof Error ? err.message : String(err))
}
const failed = results.filter((ok) => !ok).length
console.log(
  `crd-migrator helm test (${part}): ${failed === 0 ? `all ${results.length} checks passed` : `${failed} of ${results.length} checks FAILED`}`,
)
process.exit(failed === 0 ? 0 : 1)
