/**
 * What every migration run of the bench shares, built once per control plane by
 * runMigrations (migrations.ts) and passed explicitly to the run steps and the cases: the
 * settings, the control plane, the admin and migrator clients, the run's identity.
 */
import type { KubeHttp } from '../../src/kube/http.js'
import type { KubeContext } from '../../src/kube/kubeconfig.js'
import type { ControlPlane } from '../controlplane/controlplane.js'
import type { ServiceAccountIdentity } from '../controlplane/service-account.js'
import type { ConversionWebhook } from '../conversion/webhook.js'
import type { BenchSettings } from './flags.js'
import type { RunConversion } from './report.js'

export interface MigrationContext {
  settings: BenchSettings
  cp: ControlPlane
  /** The admin client (system:masters): fixtures, proofs, flow control objects. */
  http: KubeHttp
  /** The ServiceAccount the migrating processes run as, as the chart's pods do. */
  sa: ServiceAccountIdentity
  migratorKc: KubeContext
  /** A client as that ServiceAccount, to see which APF priority level its requests get. */
  migratorHttp: KubeHttp
  /** This bench run's id, in every CRD group it creates. */
  runId: string
  /** Where the KSVM logs and the migrator's kubeconfig go. */
  logsDir: string
  /** The next run's number (1, 2, ...), in its CRD group. */
  nextRunSeq: () => number
  /** A bulk request (any resource but the chart's "control" ones), to see its priority level. */
  bulkProbe: string
  /** A priority level's name from its uid. */
  levelOf: (uid: string) => Promise<string>
}

/** The conversion case's webhook and its delay during a run. */
export interface Conv {
  webhook: ConversionWebhook
  delayMs: number
}

/** What the conversion case measured while setting a run up. */
export type CaseSetup = Pick<RunConversion, 'setupReviews' | 'managedFieldsBefore'>

/** Runs a migrating process, possibly with something around it (the foreground client). */
export type Around = <T>(run: () => Promise<T>) => Promise<T>
