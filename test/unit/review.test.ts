import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { DEFAULT_ADMISSION_POLICY } from '../../src/webhook/admission.js'
import { parseAdmissionReview, reviewAdmission, toAdmissionReviewResponse, type AdmissionRequest } from '../../src/webhook/review.js'

const crd = (storage: string, annotations?: Record<string, string>) => ({
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'widgets.example.com', ...(annotations ? { annotations } : {}) },
  spec: { versions: ['v1alpha1', 'v1'].map((name) => ({ name, served: true, storage: name === storage })) },
})

function review(overrides: Record<string, unknown> = {}, requestOverrides: Record<string, unknown> = {}) {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: '705ab4f5-6393-11e8-b7cc-42010a800002',
      kind: { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
      resource: { group: 'apiextensions.k8s.io', version: 'v1', resource: 'customresourcedefinitions' },
      requestKind: { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
      name: 'widgets.example.com',
      operation: 'UPDATE',
      userInfo: { username: 'alice', uid: 'u-1', groups: ['system:authenticated'], extra: { scopes: ['x'] } },
      object: crd('v1', { [DEFAULT_MIGRATING_ANNOTATION]: 'true' }),
      oldObject: crd('v1alpha1', { [DEFAULT_MIGRATING_ANNOTATION]: 'true' }),
      dryRun: false,
      options: { apiVersion: 'meta.k8s.io/v1', kind: 'UpdateOptions' },
      ...requestOverrides,
    },
    ...overrides,
  }
}

const without = (key: string) => {
  const body = review()
  delete (body.request as Record<string, unknown>)[key]
  return body
}

const malformed: Array<[string, unknown, string]> = [
  ['body is an array', [], 'body must be a JSON object (an AdmissionReview), got an array'],
  ['body is a string', 'hello', 'body must be a JSON object (an AdmissionReview), got "hello"'],
  ['body is null', null, 'body must be a JSON object (an AdmissionReview), got null'],
  [
    'v1beta1 review',
    review({ apiVersion: 'admission.k8s.io/v1beta1' }),
    'apiVersion must be "admission.k8s.io/v1" (set admissionReviewVersions: [v1]), got "admission.k8s.io/v1beta1"',
  ],
  [
    'no apiVersion',
    review({ apiVersion: undefined }),
    'apiVersion must be "admission.k8s.io/v1" (set admissionReviewVersions: [v1]), got nothing',
  ],
  ['wrong kind', review({ kind: 'AdmissionRequest' }), 'kind must be "AdmissionReview", got "AdmissionRequest"'],
  ['no request', review({ request: undefined }), 'AdmissionReview.request must be an object, got nothing'],
  ['request is a list', review({ request: [] }), 'AdmissionReview.request must be an object, got an array'],
  ['no uid', without('uid'), 'request.uid must be a non-empty string, got nothing'],
  ['empty uid', review({}, { uid: '' }), 'request.uid must be a non-empty string, got ""'],
  ['numeric uid', review({}, { uid: 7 }), 'request.uid must be a non-empty string, got number 7'],
  ['no kind', without('kind'), 'request.kind must be an object, got nothing'],
  [
    'kind without version',
    review({}, { kind: { group: 'apiextensions.k8s.io', kind: 'CustomResourceDefinition' } }),
    'request.kind.version must be a string, got nothing',
  ],
  ['no resource', without('resource'), 'request.resource must be an object, got nothing'],
  [
    'resource without resource',
    review({}, { resource: { group: '', version: 'v1' } }),
    'request.resource.resource must be a string, got nothing',
  ],
  ['no operation', without('operation'), 'request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got nothing'],
  [
    'unknown operation',
    review({}, { operation: 'PATCH' }),
    'request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got "PATCH"',
  ],
  ['no userInfo', without('userInfo'), 'request.userInfo must be an object, got nothing'],
  [
    'groups not a list',
    review({}, { userInfo: { username: 'a', groups: 'system:masters' } }),
    'request.userInfo.groups must be an array of strings, got "system:masters"',
  ],
  [
    'groups with a number',
    review({}, { userInfo: { username: 'a', groups: ['a', 1] } }),
    'request.userInfo.groups[1] must be a string, got number 1',
  ],
  [
    'extra not an object',
    review({}, { userInfo: { username: 'a', extra: ['JTI=x'] } }),
    'request.userInfo.extra must be an object of string lists, got an array',
  ],
  [
    'extra value not a list',
    review({}, { userInfo: { username: 'a', extra: { 'authentication.kubernetes.io/credential-id': 'JTI=x' } } }),
    'request.userInfo.extra["authentication.kubernetes.io/credential-id"] must be an array of strings, got "JTI=x"',
  ],
  [
    'extra list with a number',
    review({}, { userInfo: { username: 'a', extra: { k: ['a', 2] } } }),
    'request.userInfo.extra["k"][1] must be a string, got number 2',
  ],
  ['username a number', review({}, { userInfo: { username: 1 } }), 'request.userInfo.username must be a string, got number 1'],
  ['dryRun a string', review({}, { dryRun: 'yes' }), 'request.dryRun must be a boolean, got "yes"'],
  ['name a number', review({}, { name: 3 }), 'request.name must be a string, got number 3'],
]

for (const [name, body, error] of malformed) {
  t.test(`not a well-formed review: ${name}`, async (t) => {
    t.same(parseAdmissionReview(body), { ok: false, error })
  })
}

t.test('a well-formed review is parsed, unknown fields ignored', async (t) => {
  const result = parseAdmissionReview(review())
  t.ok(result.ok)
  if (!result.ok) return
  const r = result.request
  t.equal(r.uid, '705ab4f5-6393-11e8-b7cc-42010a800002')
  t.equal(r.operation, 'UPDATE')
  t.equal(r.name, 'widgets.example.com')
  t.same(r.userInfo, { username: 'alice', uid: 'u-1', groups: ['system:authenticated'], extra: { scopes: ['x'] } })
  t.equal(r.dryRun, false)
  t.same(r.object, crd('v1', { [DEFAULT_MIGRATING_ANNOTATION]: 'true' }))
  t.same(r.oldObject, crd('v1alpha1', { [DEFAULT_MIGRATING_ANNOTATION]: 'true' }))
})

t.test('userInfo fields are omitempty: absent username and groups mean empty', async (t) => {
  const result = parseAdmissionReview(review({}, { userInfo: {} }))
  t.ok(result.ok)
  if (result.ok) t.same(result.request.userInfo, { username: '', groups: [] })
})

t.test('null object on DELETE is well-formed (the decision judges it)', async (t) => {
  const result = parseAdmissionReview(review({}, { operation: 'DELETE', object: null }))
  t.ok(result.ok)
  if (result.ok) t.equal(result.request.object, null)
})

function parsed(requestOverrides: Record<string, unknown> = {}): AdmissionRequest {
  const result = parseAdmissionReview(review({}, requestOverrides))
  if (!result.ok) throw new Error(result.error)
  return result.request
}

t.test('a review of another resource is allowed with a warning', async (t) => {
  const decision = reviewAdmission(
    parsed({
      resource: { group: 'apps', version: 'v1', resource: 'deployments' },
      kind: { group: 'apps', version: 'v1', kind: 'Deployment' },
    }),
    DEFAULT_ADMISSION_POLICY,
  )
  t.equal(decision.allowed, true)
  t.equal(decision.reason, 'unexpected-resource')
  t.match(decision.warnings?.[0], /apps\/v1 deployments/)
})

t.test('a core-group resource is named "core" in the warning', async (t) => {
  const decision = reviewAdmission(parsed({ resource: { group: '', version: 'v1', resource: 'configmaps' } }), DEFAULT_ADMISSION_POLICY)
  t.equal(decision.reason, 'unexpected-resource')
  t.match(decision.warnings?.[0], /core\/v1 configmaps/)
})

t.test('a CRD review through v1beta1 (not converted) is not judged', async (t) => {
  const decision = reviewAdmission(
    parsed({ resource: { group: 'apiextensions.k8s.io', version: 'v1beta1', resource: 'customresourcedefinitions' } }),
    DEFAULT_ADMISSION_POLICY,
  )
  t.equal(decision.reason, 'unexpected-resource')
})

t.test('a CRD review is decided by the freeze', async (t) => {
  const decision = reviewAdmission(parsed(), DEFAULT_ADMISSION_POLICY)
  t.equal(decision.allowed, false)
  t.equal(decision.reason, 'storage-version-frozen')
})

t.test('UPDATE without oldObject is answered, denied', async (t) => {
  const request = parsed()
  delete request.oldObject
  const decision = reviewAdmission(request, DEFAULT_ADMISSION_POLICY)
  t.equal(decision.allowed, false)
  t.equal(decision.reason, 'malformed-object')
})

t.test('the answer echoes the uid and carries status only on denial', async (t) => {
  const denied = toAdmissionReviewResponse('abc', { allowed: false, reason: 'storage-version-frozen', message: 'no', code: 403 })
  t.same(denied, {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    response: { uid: 'abc', allowed: false, status: { code: 403, message: 'no' }, auditAnnotations: { reason: 'storage-version-frozen' } },
  })
  const allowed = toAdmissionReviewResponse('def', { allowed: true, reason: 'allowed' })
  t.same(allowed.response, { uid: 'def', allowed: true })
  const override = toAdmissionReviewResponse('ghi', { allowed: true, reason: 'break-glass-override', warnings: ['w'] })
  t.same(override.response, { uid: 'ghi', allowed: true, warnings: ['w'], auditAnnotations: { reason: 'break-glass-override' } })
})
