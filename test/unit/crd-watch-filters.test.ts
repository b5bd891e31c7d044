/**
 * What the controller asks the API server to send (CrdSelection.watchFilters): a watch by
 * label selector and one per name, or past MAX_NAME_WATCHES names one watch of all CRDs;
 * and label selectors the API server would refuse are refused at start-up.
 */
import t from 'tap'
import { CrdSelection, LabelSelector, MAX_NAME_WATCHES } from '../../src/select/selector.js'

t.test('a label selector and a few names: one watch each, filtered by the API server', async (t) => {
  const selection = new CrdSelection({ labelSelector: ' crd-migrator.io/managed=true ', names: ['a.example.com', 'b.example.com'] })
  t.same(selection.watchFilters(), [
    { labelSelector: 'crd-migrator.io/managed=true' },
    { fieldSelector: 'metadata.name=a.example.com' },
    { fieldSelector: 'metadata.name=b.example.com' },
  ])
  t.same(new CrdSelection({ labelSelector: '', names: ['a.example.com'] }).watchFilters(), [
    { fieldSelector: 'metadata.name=a.example.com' },
  ])
  t.same(new CrdSelection({ labelSelector: 'x', names: [] }).watchFilters(), [{ labelSelector: 'x' }])
  t.same(new CrdSelection({ labelSelector: '  ', names: [] }).watchFilters(), [], 'nothing selected: nothing watched')
})

t.test('more names than MAX_NAME_WATCHES: one watch of every CRD, chosen here', async (t) => {
  const names = Array.from({ length: MAX_NAME_WATCHES + 1 }, (_, i) => `n${i}.example.com`)
  const selection = new CrdSelection({ labelSelector: 'team=a', names })
  t.same(selection.watchFilters(), [{}])
  t.ok(selection.selects({ metadata: { name: 'n3.example.com' } }), 'a named CRD')
  t.ok(selection.selects({ metadata: { name: 'other.example.com', labels: { team: 'a' } } }), 'a labelled one')
  t.notOk(selection.selects({ metadata: { name: 'other.example.com', labels: { team: 'b' } } }), 'not the others')
  const exactly = Array.from({ length: MAX_NAME_WATCHES }, (_, i) => `n${i}.example.com`)
  t.equal(new CrdSelection({ labelSelector: '', names: exactly }).watchFilters().length, MAX_NAME_WATCHES, 'up to the limit: one per name')
})

t.test('keys and values the API server would refuse are refused here, naming them', async (t) => {
  const refused: [string, RegExp][] = [
    ['-a=b', /"-a" is not a label key/],
    ['a/b/c=d', /"a\/b\/c" is not a label key/],
    ['Example.com/a=b', /"Example.com\/a" is not a label key/],
    [`${'x'.repeat(64)}=b`, /is not a label key/],
    ['a=b c', /cannot parse "a=b c"/],
    ['a=-b', /"-b" is not a label value/],
    [`a in (ok, ${'v'.repeat(64)})`, /is not a label value/],
  ]
  for (const [selector, message] of refused) {
    t.throws(() => LabelSelector.parse(selector), { code: 'CRDM_LABEL_SELECTOR', message }, selector)
  }
  for (const selector of ['example.com/a=b', 'a.b_c-d=E.f_g-h', 'a=', `k8s.io/${'x'.repeat(63)}`, 'a notin (b,c)']) {
    t.doesNotThrow(() => LabelSelector.parse(selector), selector)
  }
})
