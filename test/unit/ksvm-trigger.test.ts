/**
 * kube-storage-version-migrator's trigger decisions (pkg/trigger v0.0.5), one table: what
 * a discovered storageVersionHash, the resource's StorageState and its
 * StorageVersionMigrations lead to. The cases follow KSVM's discovery_handler_test.go.
 */
import t from 'tap'
import { metaTime, type StorageVersionMigration } from '../../src/controller/ksvm-state.js'
import {
  decideDiscovery,
  isStale,
  newStorageState,
  nextStatus,
  statusAfterMigration,
  storageStateName,
  type StorageState,
} from '../../src/controller/ksvm-trigger-state.js'
import type { DiscoveredResource } from '../../src/kube/discovery.js'

const NOW = new Date('2026-11-25T12:00:00Z')
const POLL_MS = 600_000
const widgets: DiscoveredResource = { group: 'example.com', version: 'v2', resource: 'widgets', storageVersionHash: 'h2' }

const state = (current: string, persisted: string[], heartbeatAgoMs = 60_000): StorageState => ({
  metadata: { name: 'widgets.example.com' },
  spec: { resource: { group: 'example.com', resource: 'widgets' } },
  status: {
    currentStorageVersionHash: current,
    persistedStorageVersionHashes: persisted,
    lastHeartbeatTime: metaTime(new Date(NOW.getTime() - heartbeatAgoMs)),
  },
})

const migration = (name: string, condition?: 'Running' | 'Succeeded' | 'Failed', resource = 'widgets'): StorageVersionMigration => ({
  metadata: { name },
  spec: { resource: { group: 'example.com', version: 'v1', resource } },
  status: { conditions: condition ? [{ type: condition, status: 'True' }] : [] },
})

t.test('decideDiscovery: when a migration is (re)launched, and what is deleted first', async (t) => {
  const cases: {
    name: string
    discovered?: DiscoveredResource
    state: StorageState | undefined
    migrations?: StorageVersionMigration[]
    want: { reason: string; deleteState: boolean; deleteMigrations: string[]; launches: boolean } | undefined
  }[] = [
    {
      name: 'no StorageState yet: launch (every resource is migrated once, as KSVM does on its first discovery)',
      state: undefined,
      want: { reason: 'new', deleteState: false, deleteMigrations: [], launches: true },
    },
    {
      name: 'no storageVersionHash (nothing stored, e.g. an aggregated API): nothing at all',
      discovered: { ...widgets, storageVersionHash: '' },
      state: undefined,
      want: undefined,
    },
    {
      name: 'same hash, migrated: only the heartbeat',
      state: state('h2', ['h2']),
      migrations: [migration('old', 'Succeeded')],
      want: { reason: 'unchanged', deleteState: false, deleteMigrations: [], launches: false },
    },
    {
      name: 'the hash changed (a storage flip): every migration of the resource deleted, a pending one too, and a new one',
      state: state('h1', ['h1']),
      migrations: [migration('done', 'Succeeded'), migration('pending'), migration('other', undefined, 'gadgets')],
      want: { reason: 'changed', deleteState: false, deleteMigrations: ['done', 'pending'], launches: true },
    },
    {
      name: 'not migrated, no migration at all (deleted by someone): relaunch',
      state: state('h2', ['Unknown']),
      want: { reason: 'unmigrated', deleteState: false, deleteMigrations: [], launches: true },
    },
    {
      name: 'not migrated, the last migration Failed: relaunch (once per discovery)',
      state: state('h2', ['h1', 'h2']),
      migrations: [migration('failed', 'Failed')],
      want: { reason: 'unmigrated', deleteState: false, deleteMigrations: ['failed'], launches: true },
    },
    {
      name: 'not migrated, a migration pending: wait for it',
      state: state('h2', ['h1', 'h2']),
      migrations: [migration('pending')],
      want: { reason: 'unchanged', deleteState: false, deleteMigrations: [], launches: false },
    },
    {
      name: 'not migrated, a migration running: wait for it',
      state: state('h2', ['Unknown']),
      migrations: [migration('running', 'Running')],
      want: { reason: 'unchanged', deleteState: false, deleteMigrations: [], launches: false },
    },
    {
      name: 'a pending migration of another resource does not count',
      state: state('h2', ['Unknown']),
      migrations: [migration('other', undefined, 'gadgets')],
      want: { reason: 'unmigrated', deleteState: false, deleteMigrations: [], launches: true },
    },
    {
      name: 'stale (heartbeat older than two polls): the state is deleted and the migration relaunched',
      state: state('h2', ['h2'], 2 * POLL_MS + 1000),
      migrations: [migration('done', 'Succeeded')],
      want: { reason: 'stale', deleteState: true, deleteMigrations: ['done'], launches: true },
    },
    {
      name: 'exactly two polls old is not stale yet',
      state: state('h2', ['h2'], 2 * POLL_MS),
      want: { reason: 'unchanged', deleteState: false, deleteMigrations: [], launches: false },
    },
  ]
  for (const c of cases) {
    const discovered = c.discovered ?? widgets
    const got = decideDiscovery({ discovered, state: c.state, migrations: c.migrations ?? [], heartbeat: NOW, staleAfterMs: 2 * POLL_MS })
    if (!c.want) {
      t.equal(got, undefined, c.name)
      continue
    }
    t.same(
      got && {
        reason: got.reason,
        deleteState: got.deleteState,
        deleteMigrations: got.deleteMigrations,
        launches: got.createMigration !== undefined,
      },
      c.want,
      c.name,
    )
    if (got?.createMigration) {
      t.same(
        got.createMigration,
        {
          apiVersion: 'migration.k8s.io/v1alpha1',
          kind: 'StorageVersionMigration',
          metadata: { name: '', generateName: 'widgets.example.com-' },
          spec: { resource: { group: 'example.com', version: 'v2', resource: 'widgets' } },
        },
        `${c.name}: KSVM's migration, generateName <resource>.<group>-, no labels, at the discovered version`,
      )
    }
  }
})

t.test('nextStatus: the current hash, the persisted ones, the heartbeat', async (t) => {
  const cases: { name: string; state: StorageState | undefined; hash: string; persisted: string[] }[] = [
    { name: 'a new state: Unknown (objects may be stored in any version)', state: undefined, hash: 'h1', persisted: ['Unknown'] },
    { name: 'a state created with no status yet: Unknown', state: newStorageState(widgets), hash: 'h1', persisted: ['Unknown'] },
    { name: 'the same hash: persisted unchanged', state: state('h1', ['h1']), hash: 'h1', persisted: ['h1'] },
    { name: 'a new hash is appended', state: state('h1', ['h1']), hash: 'h2', persisted: ['h1', 'h2'] },
    {
      name: 'appended again on a second change before a migration finished',
      state: state('h2', ['h1', 'h2']),
      hash: 'h3',
      persisted: ['h1', 'h2', 'h3'],
    },
    { name: 'after Unknown', state: state('h1', ['Unknown']), hash: 'h2', persisted: ['Unknown', 'h2'] },
  ]
  for (const c of cases) {
    t.same(
      nextStatus(c.state, c.hash, NOW),
      { currentStorageVersionHash: c.hash, persistedStorageVersionHashes: c.persisted, lastHeartbeatTime: '2026-11-25T12:00:00Z' },
      c.name,
    )
  }
})

t.test('statusAfterMigration: a Succeeded migration leaves only the current hash', async (t) => {
  t.same(statusAfterMigration(state('h2', ['h1', 'h2']), migration('m', 'Succeeded'))?.persistedStorageVersionHashes, ['h2'])
  t.same(statusAfterMigration(state('h2', ['Unknown']), migration('m', 'Succeeded'))?.persistedStorageVersionHashes, ['h2'])
  t.equal(statusAfterMigration(state('h2', ['h2']), migration('m', 'Succeeded')), undefined, 'already so: nothing to write')
  t.equal(
    statusAfterMigration(state('h2', ['h1', 'h2']), migration('m', 'Failed')),
    undefined,
    'Failed: nothing (the next discovery relaunches)',
  )
  t.equal(statusAfterMigration(state('h2', ['h1', 'h2']), migration('m', 'Running')), undefined, 'still running')
  t.equal(
    statusAfterMigration(state('h2', ['h1', 'h2']), migration('m', 'Succeeded'))?.lastHeartbeatTime,
    state('h2', []).status?.lastHeartbeatTime,
    'the heartbeat is kept',
  )
})

t.test('names and staleness', async (t) => {
  t.equal(storageStateName({ group: 'example.com', resource: 'widgets' }), 'widgets.example.com')
  t.equal(storageStateName({ group: '', resource: 'pods' }), 'pods', 'the core group: the resource alone')
  t.same(newStorageState({ group: '', resource: 'secrets' }), {
    apiVersion: 'migration.k8s.io/v1alpha1',
    kind: 'StorageState',
    metadata: { name: 'secrets' },
    spec: { resource: { group: '', resource: 'secrets' } },
  })
  t.ok(isStale({ metadata: { name: 'x' } }, NOW, POLL_MS), 'no heartbeat at all is stale (KSVM: the zero time)')
  t.notOk(isStale(state('h', ['h'], 1000), NOW, POLL_MS))
  t.equal(metaTime(new Date('2026-01-02T03:04:05.678Z')), '2026-01-02T03:04:05Z')
})
