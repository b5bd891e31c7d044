import t from 'tap'
import { KubeApiError } from '../../src/kube/api-errors.js'
import type { KubeHttp, KubeRequest } from '../../src/kube/http.js'
import { accessVerdict, checksFor, describeCheck, migrationAccess, type AccessAnswer } from '../../src/kube/access-review.js'

const widgets = { group: 'example.com', plural: 'widgets' }

t.test('checksFor: list and patch, and patch of /status when writes go there', async (t) => {
  t.same(checksFor(widgets).map(describeCheck), ['list widgets.example.com', 'patch widgets.example.com'])
  t.same(checksFor(widgets, { statusSubresource: true }).map(describeCheck), [
    'list widgets.example.com',
    'patch widgets.example.com',
    'patch widgets.example.com/status',
  ])
  t.same(checksFor({ group: '', plural: 'secrets' }).map(describeCheck), ['list secrets', 'patch secrets'], 'core group: no suffix')
})

t.test('accessVerdict: allowed only when nothing is denied', async (t) => {
  const [list, patch] = checksFor(widgets) as [AccessAnswer['check'], AccessAnswer['check']]
  t.same(
    accessVerdict([
      { check: list, allowed: true },
      { check: patch, allowed: true },
    ]),
    { allowed: true, unverified: [] },
  )
  const denied = accessVerdict([
    { check: list, allowed: false, reason: 'no RBAC rule' },
    { check: patch, allowed: false, reason: 'no RBAC rule' },
  ])
  t.equal(denied.allowed, false)
  t.match(denied, {
    denied: [list, patch],
    reason: 'the migrator may not list widgets.example.com, patch widgets.example.com in all namespaces (RBAC) (no RBAC rule)',
  })
  const onlyPatch = accessVerdict([
    { check: list, allowed: true },
    { check: patch, allowed: false },
  ])
  t.match(onlyPatch, { allowed: false, denied: [patch], reason: 'the migrator may not patch widgets.example.com in all namespaces (RBAC)' })
  t.same(
    accessVerdict([
      { check: list, allowed: true },
      { check: patch, allowed: undefined },
    ]),
    { allowed: true, unverified: [patch] },
    'an unknown answer is no denial, and is said',
  )
  t.same(accessVerdict([]), { allowed: true, unverified: [] })
})

/** A KubeHttp answering SelfSubjectAccessReviews from `allowed` (by "verb resource"), or failing them with `ssarStatus`. */
function fakeHttp(allowed: Set<string>, ssarStatus?: number, listStatus = 200) {
  const seen: KubeRequest[] = []
  const http = {
    request: async (req: KubeRequest) => {
      seen.push(req)
      if (req.path.endsWith('/selfsubjectaccessreviews')) {
        if (ssarStatus) throw new KubeApiError(ssarStatus, 'POST', req.path, '', undefined)
        const a = (req.body as { spec: { resourceAttributes: { verb: string; resource: string; subresource?: string } } }).spec
          .resourceAttributes
        const key = `${a.verb} ${a.resource}${a.subresource ? `/${a.subresource}` : ''}`
        return { status: 201, headers: {}, body: { status: { allowed: allowed.has(key), ...(allowed.has(key) ? {} : { reason: 'no' }) } } }
      }
      if (listStatus !== 200) throw new KubeApiError(listStatus, 'GET', req.path, '', undefined)
      return { status: 200, headers: {}, body: { items: [] } }
    },
  } as unknown as KubeHttp
  return { http, seen }
}

t.test('migrationAccess asks one SelfSubjectAccessReview per verb, cluster-wide', async (t) => {
  const { http, seen } = fakeHttp(new Set(['list widgets']))
  const verdict = await migrationAccess(http, { ...widgets, version: 'v2' })
  t.match(verdict, { allowed: false, reason: /may not patch widgets\.example\.com in all namespaces \(RBAC\) \(no\)/ })
  t.equal(seen.length, 2)
  t.same(
    seen.map((r) => (r.body as { spec: unknown }).spec),
    [
      { resourceAttributes: { verb: 'list', group: 'example.com', resource: 'widgets' } },
      { resourceAttributes: { verb: 'patch', group: 'example.com', resource: 'widgets' } },
    ],
    'no namespace: all of them',
  )
  t.same(await migrationAccess(fakeHttp(new Set(['list widgets', 'patch widgets'])).http, { ...widgets, version: 'v2' }), {
    allowed: true,
    unverified: [],
  })
})

t.test('where SelfSubjectAccessReviews are refused, a list of one object stands in for list', async (t) => {
  const allowed = await migrationAccess(fakeHttp(new Set(), 403).http, { ...widgets, version: 'v2' })
  t.same(allowed, { allowed: true, unverified: [{ verb: 'patch', group: 'example.com', resource: 'widgets' }] }, 'patch unverified')
  const { http, seen } = fakeHttp(new Set(), 403, 403)
  t.match(await migrationAccess(http, { ...widgets, version: 'v2' }), { allowed: false, reason: /may not list widgets\.example\.com/ })
  t.match(
    seen.find((r) => r.method === 'GET'),
    { path: '/apis/example.com/v2/widgets', query: { limit: 1 } },
  )
})

t.test('other failures of the review are thrown, not taken for an answer', async (t) => {
  await t.rejects(migrationAccess(fakeHttp(new Set(), 500).http, { ...widgets, version: 'v2' }), { name: 'KubeApiError', message: /500/ })
})

t.test(
  'a run that freezes a CRD is also asked whether it may patch that CRD (and its /status when it narrows storedVersions)',
  async (t) => {
    const crd = { name: 'widgets.example.com', storedVersions: true }
    t.same(checksFor(widgets, { crd }).map(describeCheck), [
      'list widgets.example.com',
      'patch widgets.example.com',
      'patch customresourcedefinitions.apiextensions.k8s.io "widgets.example.com"',
      'patch customresourcedefinitions.apiextensions.k8s.io/status "widgets.example.com"',
    ])
    t.same(
      checksFor(widgets, { crd: { ...crd, storedVersions: false } }).map(describeCheck),
      [
        'list widgets.example.com',
        'patch widgets.example.com',
        'patch customresourcedefinitions.apiextensions.k8s.io "widgets.example.com"',
      ],
      'a run that leaves storedVersions alone needs no /status',
    )
    const { http, seen } = fakeHttp(new Set(['list widgets', 'patch widgets', 'patch customresourcedefinitions']))
    const verdict = await migrationAccess(http, { ...widgets, version: 'v2' }, { crd })
    t.match(verdict, {
      allowed: false,
      reason: 'the migrator may not patch customresourcedefinitions.apiextensions.k8s.io/status "widgets.example.com" (RBAC) (no)',
    })
    t.same((seen[3]!.body as { spec: unknown }).spec, {
      resourceAttributes: {
        verb: 'patch',
        group: 'apiextensions.k8s.io',
        resource: 'customresourcedefinitions',
        subresource: 'status',
        name: 'widgets.example.com',
      },
    })
    const both = accessVerdict(checksFor(widgets, { crd }).map((check) => ({ check, allowed: check.verb === 'list' })))
    t.match(both, {
      reason:
        'the migrator may not patch widgets.example.com in all namespaces, patch customresourcedefinitions.apiextensions.k8s.io "widgets.example.com", ' +
        'patch customresourcedefinitions.apiextensions.k8s.io/status "widgets.example.com" (RBAC)',
    })
  },
)
