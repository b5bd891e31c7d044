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
component labels (from src/devcerts/webhook-config.ts) plus the chart-only ones below. */}}
{{- define "crd-migrator.chartLabels" -}}
helm.sh/chart: {{ include "crd-migrator.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "crd-migrator.labels" -}}
app.kubernetes.io/name: {{ include "crd-migrator.name" . }}
{{ include "crd-migrator.chartLabels" . }}
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
The migrating annotation key, checked like src/devcerts/webhook-config.ts checks it: it
is pasted into a CEL string literal, so anything but a valid annotation key is refused.
*/}}
{{- define "crd-migrator.migratingAnnotation" -}}
{{- $key := .Values.annotations.migrating }}
{{- if not (regexMatch "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$" $key) }}
{{- fail (printf "annotations.migrating: %q is not a Kubernetes annotation key such as example.com/migrating" $key) }}
{{- end }}
{{- $key }}
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

{{/*
The crd-migrator config file (see src/config/schema.ts), built from values. POD_NAMESPACE
(the Lease namespace) and POD_NAME (the identity) come from the environment.
*/}}
{{- define "crd-migrator.config" -}}
{{- $config := dict
  "logLevel" .Values.logLevel
  "annotations" (dict "migrating" (include "crd-migrator.migratingAnnotation" .))
  "identities" (dict
    "migratorUsers" (include "crd-migrator.migratorUsers" . | fromJsonArray)
    "migratorGroups" .Values.identities.migratorGroups
    "breakGlassGroups" .Values.identities.breakGlassGroups)
  "webhook" (dict "enabled" true "port" (int .Values.webhook.port) "certFile" "/tls/tls.crt" "keyFile" "/tls/tls.key")
  "metrics" (dict "port" (int .Values.metrics.port))
  "migrator" (dict
    "enabled" .Values.migrator.enabled
    "selector" (dict "labelSelector" .Values.migrator.selector "names" .Values.migrator.names)
    "concurrency" (int .Values.migrator.concurrency)
    "qps" .Values.migrator.qps
    "skipPhases" .Values.migrator.skipPhases
    "crds" (deepCopy .Values.migrator.crds))
  "leaderElection" (dict "enabled" .Values.leaderElection.enabled "leaseName" (include "crd-migrator.leaseName" .))
}}
{{- mustMergeOverwrite $config (deepCopy .Values.extraConfig) | toYaml }}
{{- end }}
