{{/* Chart name, as used in labels. */}}
{{- define "crd-migrator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the prefix of every resource name. */}}
{{- define "crd-migrator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "crd-migrator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the pods. */}}
{{- define "crd-migrator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "crd-migrator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every resource. The ValidatingWebhookConfiguration has its own name and
component labels (from src/webhook/configuration.ts) plus the chart-only ones below. */}}
{{- define "crd-migrator.chartLabels" -}}
helm.sh/chart: {{ include "crd-migrator.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: crd-migrator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels of a resource of the server: the pods and what they run on (Deployment,
Service, config, ServiceAccount, PodDisruptionBudget, NetworkPolicy, state key). */}}
{{- define "crd-migrator.labels" -}}
{{ include "crd-migrator.componentLabels" (dict "context" . "component" "server") }}
{{- end }}

{{/* The labels of a resource of another component: (dict "context" $ "component" "rbac"). */}}
{{- define "crd-migrator.componentLabels" -}}
app.kubernetes.io/name: {{ include "crd-migrator.name" .context }}
app.kubernetes.io/component: {{ .component }}
{{ include "crd-migrator.chartLabels" .context }}
{{- end }}

{{- define "crd-migrator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "crd-migrator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create=false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "crd-migrator.leaseName" -}}
{{- default (include "crd-migrator.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* The cert-manager Certificate of the webhook's serving certificate. */}}
{{- define "crd-migrator.certificateName" -}}
{{- printf "%s-serving" (include "crd-migrator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret holding the serving certificate, mounted at /tls. */}}
{{- define "crd-migrator.tlsSecretName" -}}
{{- if .Values.certManager.enabled }}
{{- printf "%s-serving-tls" (include "crd-migrator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- required "tls.existingSecret is required when certManager.enabled=false" .Values.tls.existingSecret }}
{{- end }}
{{- end }}

{{- define "crd-migrator.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The migrating annotation key: it is pasted into a CEL string literal, so anything but a
valid annotation key is refused. The pattern is ANNOTATION_KEY_PATTERN of
src/config/schema.ts, the one the config and the webhook configuration renderer check it
with; test/unit/annotation-key.test.ts keeps the two equal.
*/}}
{{- define "crd-migrator.migratingAnnotation" -}}
{{- $key := .Values.annotations.migrating }}
{{- if not (regexMatch "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$" $key) }}
{{- fail (printf "annotations.migrating: %q is not a Kubernetes annotation key such as example.com/migrating" $key) }}
{{- end }}
{{- $key }}
{{- end }}

{{/*
API groups kube-apiserver serves itself (Kubernetes v1.35 to v1.37, every alpha and beta
group included, e.g. lifecycle.k8s.io, alpha since v1.37; plus the legacy and review-only
groups of k8s.io/api). No CRD lives in them, so
rbac.managedGroups and the CRDs of migrator.names / migrator.crds may not name them:
get/list/patch there would reach Pods, Secrets, RBAC or webhook configurations. Only these
exact names: CRDs in other *.k8s.io groups (gateway.networking.k8s.io,
snapshot.storage.k8s.io, *.x-k8s.io) are allowed.
*/}}
{{- define "crd-migrator.builtinApiGroups" -}}
{{- list
  "admission.k8s.io"
  "admissionregistration.k8s.io"
  "apidiscovery.k8s.io"
  "apiextensions.k8s.io"
  "apiregistration.k8s.io"
  "apps"
  "authentication.k8s.io"
  "authorization.k8s.io"
  "autoscaling"
  "batch"
  "certificates.k8s.io"
  "coordination.k8s.io"
  "discovery.k8s.io"
  "events.k8s.io"
  "extensions"
  "flowcontrol.apiserver.k8s.io"
  "imagepolicy.k8s.io"
  "internal.apiserver.k8s.io"
  "lifecycle.k8s.io"
  "networking.k8s.io"
  "node.k8s.io"
  "policy"
  "rbac.authorization.k8s.io"
  "resource.k8s.io"
  "scheduling.k8s.io"
  "storage.k8s.io"
  "storagemigration.k8s.io"
  | toJson }}
{{- end }}

{{/*
Fails unless .group may get an RBAC rule of the migrator: not "*", not "" (the core
group), not a group of kube-apiserver's own. .what names the value for the message.
*/}}
{{- define "crd-migrator.checkApiGroup" -}}
{{- if eq .group "*" }}
{{- fail (printf "%s: \"*\" would grant get/list/patch on every API group, Secrets and RBAC included; list the groups of your CRDs, or set rbac.allGroups=true if you really mean every group" .what) }}
{{- else if eq .group "" }}
{{- fail (printf "%s: \"\" is the core API group (Pods, Secrets, ...), where no CRD lives; list the groups of your CRDs" .what) }}
{{- else if has .group (include "crd-migrator.builtinApiGroups" . | fromJsonArray) }}
{{- fail (printf "%s: %q is an API group kube-apiserver serves itself, where no CRD lives; list the groups of your CRDs" .what .group) }}
{{- end }}
{{- end }}

{{/*
Refuses RBAC grants outside custom resources: rbac.managedGroups and the groups of the
CRDs in migrator.names / migrator.crds. Rendered for every install, RBAC or not.
*/}}
{{- define "crd-migrator.checkApiGroups" -}}
{{- range $group := .Values.rbac.managedGroups }}
{{- include "crd-migrator.checkApiGroup" (dict "group" $group "what" "rbac.managedGroups") }}
{{- end }}
{{- range $crd := include "crd-migrator.namedCrds" . | fromJsonArray }}
{{- include "crd-migrator.checkApiGroup" (dict "group" $crd.group "what" (printf "migrator.names / migrator.crds (%s)" $crd.name)) }}
{{- end }}
{{- $_ := include "crd-migrator.builtInResources" . }}
{{- $_ := include "crd-migrator.stashResources" . }}
{{- end }}

{{/*
migrator.builtInResources, as a JSON list of {group, resource} (duplicates dropped), each
checked: a string group ("" is the core group) and a non-empty resource, neither "*" nor
holding "*" or "/". Each entry is one RBAC rule for exactly that resource; values.schema.json
refuses the same, this holds with --skip-schema-validation too.
*/}}
{{- define "crd-migrator.builtInResources" -}}
{{- $out := list }}
{{- range $i, $entry := .Values.migrator.builtInResources }}
{{- $what := printf "migrator.builtInResources[%d]" $i }}
{{- if not (kindIs "map" $entry) }}
{{- fail (printf "%s must be {group, resource}, e.g. {group: \"\", resource: secrets}" $what) }}
{{- end }}
{{- $group := get $entry "group" }}
{{- $resource := get $entry "resource" }}
{{- if not (and (hasKey $entry "group") (kindIs "string" $group)) }}
{{- fail (printf "%s.group must be a string: the API group, \"\" for the core group (secrets, configmaps, ...)" $what) }}
{{- end }}
{{- if not (and (kindIs "string" $resource) $resource) }}
{{- fail (printf "%s.resource must name one resource (its plural), e.g. secrets" $what) }}
{{- end }}
{{- if or (contains "*" $group) (contains "*" $resource) }}
{{- fail (printf "%s: \"*\" would grant get/list/patch on more than one resource; name each built-in resource to migrate, e.g. {group: \"\", resource: secrets}" $what) }}
{{- end }}
{{- if contains "/" $resource }}
{{- fail (printf "%s.resource: %q is a subresource; name the resource itself" $what $resource) }}
{{- end }}
{{- $out = append $out (dict "group" $group "resource" $resource) }}
{{- end }}
{{- $out | uniq | toJson }}
{{- end }}

{{/*
The stash presets' resources, as src/migrator/phases/stashes/rules.ts (PRESETS) has them: the
resource holding the stashes and the resources pointing at them. Only what the RBAC needs.
*/}}
{{- define "crd-migrator.stashPresets" -}}
{{- dict
  "kubevirt-instancetypes" (dict
    "source" (dict "group" "apps" "resource" "controllerrevisions")
    "referrers" (list (dict "group" "kubevirt.io" "resource" "virtualmachines")))
  | toJson }}
{{- end }}

{{/*
Fails unless .r ({group, resource} of a stash rule) names exactly one resource: a string
group ("" is the core group), a non-empty resource, no "*", no subresource.
*/}}
{{- define "crd-migrator.checkStashResource" -}}
{{- $r := .r }}
{{- if not (kindIs "map" $r) }}
{{- fail (printf "%s must be {group, version, resource, ...}" .what) }}
{{- end }}
{{- if not (and (hasKey $r "group") (kindIs "string" (get $r "group"))) }}
{{- fail (printf "%s.group must be a string: the API group, \"\" for the core group" .what) }}
{{- end }}
{{- if not (and (kindIs "string" (get $r "resource")) (get $r "resource")) }}
{{- fail (printf "%s.resource must name one resource (its plural), e.g. controllerrevisions" .what) }}
{{- end }}
{{- if or (contains "*" (get $r "group")) (contains "*" (get $r "resource")) }}
{{- fail (printf "%s: \"*\" would grant more than one resource; name the resource" .what) }}
{{- end }}
{{- if contains "/" (get $r "resource") }}
{{- fail (printf "%s.resource: %q is a subresource; name the resource itself" .what (get $r "resource")) }}
{{- end }}
{{- end }}

{{/*
The RBAC of the stash rules (migrator.stashPresets, then migrator.stashes, resolved as
resolveStashRules in src/migrator/phases/stashes/rules.ts does: a rule's own source and referrers
over its preset's), as a JSON list of {group, resource, verbs, role, does}, duplicates dropped.
Per rule: its source get, list, create, delete (the replacement stash is created, the old
one deleted) and each referrer get, list, patch (repointed with a JSON patch). Every
resource is checked; values.schema.json refuses the same, this holds with
--skip-schema-validation too.
*/}}
{{- define "crd-migrator.stashResources" -}}
{{- $presets := include "crd-migrator.stashPresets" . | fromJson }}
{{- $known := keys $presets | sortAlpha | join ", " }}
{{- $rules := list }}
{{- range $i, $name := .Values.migrator.stashPresets }}
{{- if not (and (kindIs "string" $name) (hasKey $presets $name)) }}
{{- fail (printf "migrator.stashPresets[%d]: %v is not a stash preset (known: %s)" $i $name $known) }}
{{- end }}
{{- $preset := get $presets $name }}
{{- $rules = append $rules (dict "what" (printf "migrator.stashPresets[%d]" $i) "source" $preset.source "referrers" $preset.referrers) }}
{{- end }}
{{- range $i, $rule := .Values.migrator.stashes }}
{{- $what := printf "migrator.stashes[%d]" $i }}
{{- if not (kindIs "map" $rule) }}
{{- fail (printf "%s must be a stash rule {preset} or {group, source, referrers}" $what) }}
{{- end }}
{{- $base := dict }}
{{- if hasKey $rule "preset" }}
{{- if not (and (kindIs "string" $rule.preset) (hasKey $presets $rule.preset)) }}
{{- fail (printf "%s.preset: %v is not a stash preset (known: %s)" $what $rule.preset $known) }}
{{- end }}
{{- $base = get $presets $rule.preset }}
{{- else if not (and $rule.group $rule.source $rule.referrers) }}
{{- fail (printf "%s: a stash rule needs a preset, or group, source and referrers" $what) }}
{{- end }}
{{- $source := ternary $rule.source $base.source (hasKey $rule "source") }}
{{- $referrers := ternary $rule.referrers $base.referrers (hasKey $rule "referrers") }}
{{- if not (kindIs "slice" $referrers) }}
{{- fail (printf "%s.referrers must be a list of {group, version, resource, pointers}" $what) }}
{{- end }}
{{- $rules = append $rules (dict "what" $what "source" $source "referrers" $referrers) }}
{{- end }}
{{- $out := list }}
{{- range $rule := $rules }}
{{- include "crd-migrator.checkStashResource" (dict "r" $rule.source "what" (printf "%s.source" $rule.what)) }}
{{- $out = append $out (dict "group" $rule.source.group "resource" $rule.source.resource "verbs" (list "get" "list" "create" "delete") "role" "Stashes" "does" "read, a replacement created, the old one deleted") }}
{{- range $j, $r := $rule.referrers }}
{{- include "crd-migrator.checkStashResource" (dict "r" $r "what" (printf "%s.referrers[%d]" $rule.what $j)) }}
{{- $out = append $out (dict "group" $r.group "resource" $r.resource "verbs" (list "get" "list" "patch") "role" "Referrers of stashes" "does" "read and repointed with a JSON patch") }}
{{- end }}
{{- end }}
{{- $out | uniq | toJson }}
{{- end }}

{{/*
The CRDs named in values (migrator.names and the keys of migrator.crds), as a list of
dicts {name, plural, group, status}, sorted by name.
*/}}
{{- define "crd-migrator.namedCrds" -}}
{{- $names := concat .Values.migrator.names (keys .Values.migrator.crds) | uniq | sortAlpha }}
{{- $out := list }}
{{- range $name := $names }}
{{- $parts := splitn "." 2 $name }}
{{- if or (not $parts._1) (not $parts._0) }}
{{- fail (printf "CRD name %q must be <plural>.<group>" $name) }}
{{- end }}
{{- $opts := get $.Values.migrator.crds $name | default dict }}
{{- $out = append $out (dict "name" $name "plural" $parts._0 "group" $parts._1 "status" (default false $opts.useStatusSubresource)) }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
The migrator's usernames, as a JSON list: the chart's ServiceAccount first, then
identities.migratorUsers. The config file and the webhook's matchConditions use the same list.
*/}}
{{- define "crd-migrator.migratorUsers" -}}
{{- $sa := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "crd-migrator.serviceAccountName" .) }}
{{- prepend .Values.identities.migratorUsers $sa | uniq | toJson }}
{{- end }}

{{/* The Secret with the migrator's state key (HMAC of its checkpoints), 32 bytes under `key`. */}}
{{- define "crd-migrator.stateKeySecretName" -}}
{{- if .Values.migrator.stateKey.existingSecret }}
{{- .Values.migrator.stateKey.existingSecret }}
{{- else }}
{{- printf "%s-state-key" (include "crd-migrator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Where the container reads the state key (the Secret is mounted read-only at its directory). */}}
{{- define "crd-migrator.stateKeyDir" -}}
/var/run/crd-migrator/state-key
{{- end }}

{{/*
extraConfig may not set what other objects are rendered from: the webhook's matchConditions
from annotations.migrating and identities.*, the RBAC, the token and the state-key Secret
from migrator.enabled, the state-key mount from migrator.stateKeyFile, the RBAC on
StorageVersionMigrations and their CRD from migrator.storageVersionMigrations, the RBAC on
StorageStates and their CRD from migrator.ksvmTrigger, the RBAC on
stashes and their referrers from migrator.stashPresets and migrator.stashes. A config file that
disagreed with them would, e.g., freeze with an annotation the webhook never sees.
*/}}
{{- define "crd-migrator.checkExtraConfig" -}}
{{- $extra := .Values.extraConfig }}
{{- range $section := list "annotations" "identities" }}
{{- if hasKey $extra $section }}
{{- $keys := list }}
{{- if kindIs "map" (get $extra $section) }}{{ $keys = keys (get $extra $section) | sortAlpha }}{{ end }}
{{- $sample := printf "%s.%s" $section (ternary "migrating" "migratorUsers" (eq $section "annotations")) }}
{{- if $keys }}{{ $sample = printf "%s.%s" $section (first $keys) }}{{ end }}
{{- fail (printf "extraConfig.%s may not be set: set the chart value %s instead (the webhook configuration's matchConditions are rendered from the chart's %s values; a config file that differs would make webhook and server disagree)" $sample $sample $section) }}
{{- end }}
{{- end }}
{{- if kindIs "map" $extra.migrator }}
{{- if hasKey $extra.migrator "enabled" }}
{{- fail "extraConfig.migrator.enabled may not be set: set the chart value migrator.enabled instead (it also decides the RBAC, the ServiceAccount token and the state-key Secret)" }}
{{- end }}
{{- if hasKey $extra.migrator "stateKeyFile" }}
{{- fail "extraConfig.migrator.stateKeyFile may not be set: set the chart value migrator.stateKey.existingSecret instead (the chart mounts the key and points migrator.stateKeyFile at it)" }}
{{- end }}
{{- if hasKey $extra.migrator "storageVersionMigrations" }}
{{- fail "extraConfig.migrator.storageVersionMigrations may not be set: set the chart value storageVersionMigrations.enabled instead (it also decides the RBAC on StorageVersionMigrations and their CRD)" }}
{{- end }}
{{- if hasKey $extra.migrator "ksvmTrigger" }}
{{- fail "extraConfig.migrator.ksvmTrigger may not be set: set the chart values storageVersionMigrations.trigger.enabled and .pollSeconds instead (they also decide the RBAC on StorageStates and their CRD)" }}
{{- end }}
{{- range $key := list "stashPresets" "stashes" }}
{{- if hasKey $extra.migrator $key }}
{{- fail (printf "extraConfig.migrator.%s may not be set: set the chart value migrator.%s instead (the RBAC on stashes and their referrers is rendered from it)" $key $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The crd-migrator config file (see src/config/schema.ts), built from values. POD_NAMESPACE
(the Lease namespace) and POD_NAME (the identity) come from the environment.
*/}}
{{- define "crd-migrator.config" -}}
{{- include "crd-migrator.checkExtraConfig" . }}
{{- $config := dict
  "logLevel" .Values.logLevel
  "annotations" (dict "migrating" (include "crd-migrator.migratingAnnotation" .))
  "identities" (dict
    "migratorUsers" (include "crd-migrator.migratorUsers" . | fromJsonArray)
    "migratorGroups" .Values.identities.migratorGroups
    "breakGlassGroups" .Values.identities.breakGlassGroups
    "builtinMigratorUsers" .Values.identities.builtinMigratorUsers)
  "webhook" (dict "enabled" true "port" (int .Values.webhook.port) "certFile" "/tls/tls.crt" "keyFile" "/tls/tls.key")
  "metrics" (dict "port" (int .Values.metrics.port))
  "migrator" (dict
    "enabled" .Values.migrator.enabled
    "selector" (dict "labelSelector" .Values.migrator.selector "names" .Values.migrator.names)
    "concurrency" (int .Values.migrator.concurrency)
    "qps" .Values.migrator.qps
    "maxParallelCrds" (int .Values.migrator.maxParallelCrds)
    "engine" .Values.migrator.engine
    "skipPhases" .Values.migrator.skipPhases
    "crds" (deepCopy .Values.migrator.crds))
  "leaderElection" (dict "enabled" .Values.leaderElection.enabled "leaseName" (include "crd-migrator.leaseName" .))
}}
{{- /* The API server's addresses, where the NetworkPolicy knows them: slots only they may take (webhook/connection-policy.ts). */}}
{{- if .Values.networkPolicy.apiServerCIDRs }}
{{- $_ := set $config.webhook "apiServerAddresses" .Values.networkPolicy.apiServerCIDRs }}
{{- end }}
{{- if .Values.migrator.enabled }}
{{- $_ := set $config.migrator "stateKeyFile" (printf "%s/key" (include "crd-migrator.stateKeyDir" .)) }}
{{- end }}
{{- /* The CRD's consent annotations count only where the policy guarding them is rendered. */}}
{{- if and .Values.consent.enabled .Values.migrator.enabled }}
{{- $_ := set $config.migrator "consentAnnotations" true }}
{{- end }}
{{- /* Only when on: the key is absent from the config of every release that does not use it. */}}
{{- if .Values.storageVersionMigrations.enabled }}
{{- $_ := set $config.migrator "storageVersionMigrations" true }}
{{- $_ := set $config.migrator "storageVersionMigrationsUnmanaged" .Values.storageVersionMigrations.unmanaged }}
{{- end }}
{{- if .Values.storageVersionMigrations.trigger.enabled }}
{{- $_ := set $config.migrator "ksvmTrigger" (dict "enabled" true "pollSeconds" .Values.storageVersionMigrations.trigger.pollSeconds) }}
{{- end }}
{{- if .Values.migrator.stashPresets }}
{{- $_ := set $config.migrator "stashPresets" .Values.migrator.stashPresets }}
{{- end }}
{{- if .Values.migrator.stashes }}
{{- $_ := set $config.migrator "stashes" (deepCopy .Values.migrator.stashes) }}
{{- end }}
{{- mustMergeOverwrite $config (deepCopy .Values.extraConfig) | toYaml }}
{{- end }}

{{- /*
"true" when the NetworkPolicy is rendered: networkPolicy.enabled, or the API server's
addresses known (apiServerCIDRs or apiServerPeers) on the pod network.
*/}}
{{- define "crd-migrator.networkPolicyOn" -}}
{{- $np := .Values.networkPolicy -}}
{{- if or $np.enabled (and (not .Values.hostNetwork) (or $np.apiServerCIDRs $np.apiServerPeers)) }}true{{ else }}false{{ end -}}
{{- end }}
