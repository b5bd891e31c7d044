import t from 'tap'
import {
  diffRequestTotals,
  parseLabels,
  parseRequestTotals,
  requestKey,
  requestsPerCrd,
  type RequestRow,
} from '../../dev/bench/apiserver-requests.js'

const line = (labels: Record<string, string>, value: number) =>
  `apiserver_request_total{${Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .join(',')}} ${value}`

const METRICS = [
  '# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, ...',
  '# TYPE apiserver_request_total counter',
  line(
    {
      code: '200',
      component: 'apiserver',
      group: 'apiextensions.k8s.io',
      resource: 'customresourcedefinitions',
      scope: 'resource',
      subresource: '',
      verb: 'PATCH',
      version: 'v1',
    },
    5,
  ),
  line(
    {
      code: '409',
      component: 'apiserver',
      group: 'apiextensions.k8s.io',
      resource: 'customresourcedefinitions',
      scope: 'resource',
      subresource: '',
      verb: 'PATCH',
      version: 'v1',
    },
    2,
  ),
  line(
    {
      code: '200',
      component: 'apiserver',
      group: 'apiextensions.k8s.io',
      resource: 'customresourcedefinitions',
      scope: 'resource',
      subresource: 'status',
      verb: 'PATCH',
      version: 'v1',
    },
    1,
  ),
  line(
    {
      code: '200',
      component: 'apiserver',
      group: '',
      resource: 'configmaps',
      scope: 'namespace',
      subresource: '',
      verb: 'GET',
      version: 'v1',
    },
    40,
  ),
  line({ code: '200', component: 'apiserver', group: '', resource: '', scope: '', subresource: '/apis', verb: 'GET', version: '' }, 3),
  'apiserver_request_total_other{verb="GET"} 99',
  'apiserver_request_duration_seconds_count{verb="PATCH"} 17',
  '',
].join('\n')

t.test('parseLabels: values with escaped quotes, backslashes and newlines; malformed text is undefined', async (t) => {
  t.same(parseLabels('a="x",b="y\\"z",c="\\\\",d="l\\n2"'), { a: 'x', b: 'y"z', c: '\\', d: 'l\n2' })
  t.same(parseLabels(''), {})
  t.same(parseLabels('a="x",'), { a: 'x' }, 'a trailing comma is allowed')
  t.equal(parseLabels('a=x'), undefined)
  t.equal(parseLabels('a="x" b="y"'), undefined)
})

t.test('parseRequestTotals: summed over code, version, scope and component; other metrics ignored', async (t) => {
  const totals = parseRequestTotals(METRICS)
  t.same(Object.fromEntries(totals), {
    'PATCH apiextensions.k8s.io/customresourcedefinitions': 7,
    'PATCH apiextensions.k8s.io/customresourcedefinitions/status': 1,
    'GET core/configmaps': 40,
    'GET -/(non-resource)//apis': 3,
  })
  t.throws(() => parseRequestTotals('apiserver_request_total{verb="GET" 3'), /cannot read the line/)
  t.throws(() => parseRequestTotals('apiserver_request_total{verb="GET"} x'), /cannot read the line/)
})

t.test('requestKey names the core group, non-resource requests and subresources', async (t) => {
  t.equal(requestKey({ verb: 'LIST', group: '', resource: 'events', subresource: '' }), 'LIST core/events')
  t.equal(requestKey({ verb: 'POST', group: 'events.k8s.io', resource: 'events', subresource: '' }), 'POST events.k8s.io/events')
  t.equal(requestKey({ verb: 'PATCH', group: 'x.io', resource: 'widgets', subresource: 'status' }), 'PATCH x.io/widgets/status')
})

t.test('diffRequestTotals: what changed, biggest first; new keys count from zero; a counter going down is an error', async (t) => {
  const before = new Map([
    ['PATCH apiextensions.k8s.io/customresourcedefinitions', 7],
    ['GET core/configmaps', 40],
    ['LIST discovery.k8s.io/endpointslices', 1],
  ])
  const after = new Map([
    ['PATCH apiextensions.k8s.io/customresourcedefinitions', 13],
    ['GET core/configmaps', 40],
    ['LIST discovery.k8s.io/endpointslices', 3],
    ['PATCH b.io/widgets', 100],
    ['POST events.k8s.io/events', 2],
  ])
  t.same(diffRequestTotals(before, after), [
    { verb: 'PATCH', group: 'b.io', resource: 'widgets', subresource: '', count: 100 },
    { verb: 'PATCH', group: 'apiextensions.k8s.io', resource: 'customresourcedefinitions', subresource: '', count: 6 },
    { verb: 'LIST', group: 'discovery.k8s.io', resource: 'endpointslices', subresource: '', count: 2 },
    { verb: 'POST', group: 'events.k8s.io', resource: 'events', subresource: '', count: 2 },
  ])
  t.throws(() => diffRequestTotals(after, before), /went down for PATCH b.io\/widgets|went down/)
})

t.test('requestsPerCrd: object writes (status too), object reads, overhead and background apart, divided by the CRDs', async (t) => {
  const rows: RequestRow[] = [
    { verb: 'PATCH', group: 'a.io', resource: 'widgets', subresource: '', count: 600 },
    { verb: 'PATCH', group: 'a.io', resource: 'widgets', subresource: 'status', count: 3 },
    { verb: 'LIST', group: 'a.io', resource: 'widgets', subresource: '', count: 12 },
    { verb: 'PATCH', group: 'b.io', resource: 'widgets', subresource: '', count: 600 },
    { verb: 'PATCH', group: 'apiextensions.k8s.io', resource: 'customresourcedefinitions', subresource: '', count: 18 },
    { verb: 'GET', group: '', resource: 'configmaps', subresource: '', count: 400 },
  ]
  const r = requestsPerCrd(rows, 6, { objects: 'widgets', background: (x) => x.resource === 'configmaps' })
  t.same(
    r.rows.map((x) => [x.kind, x.perCrd]),
    [
      ['object-write', 200],
      ['object-write', 0.5],
      ['object-read', 2],
      ['overhead', 3],
      ['background', 66.67],
    ],
  )
  t.same(
    r.rows.filter((x) => x.kind === 'object-write').map((x) => [x.group, x.count]),
    [
      ['(each)', 1200],
      ['(each)', 3],
    ],
    "the objects' rows summed over their groups",
  )
  t.same(r.totals, { 'object-write': 200.5, 'object-read': 2, overhead: 3, background: 66.67 })
})
