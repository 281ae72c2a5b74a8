{{/*
Names and labels shared by every template. Cluster-scoped objects (ClusterRoles,
the webhook configuration, flow-control objects) carry the full name, so that two
releases in one cluster never collide.
*/}}

{{- define "kubeflake.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubeflake.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kubeflake.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable across upgrades (a Deployment selector is immutable). */}}
{{- define "kubeflake.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubeflake.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* Every object of the release carries these; the uninstall test lists objects by them. */}}
{{- define "kubeflake.labels" -}}
helm.sh/chart: {{ include "kubeflake.chart" . }}
app.kubernetes.io/name: {{ include "kubeflake.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubeflake
{{- end -}}

{{- define "kubeflake.serviceAccountName" -}}
{{- default (include "kubeflake.fullname" .) .Values.operator.serviceAccount.name -}}
{{- end -}}

{{- define "kubeflake.sidecarClusterRole" -}}
{{- printf "%s-sidecar" (include "kubeflake.fullname" .) -}}
{{- end -}}

{{/* The Lease policy and its binding (both by this name). */}}
{{- define "kubeflake.leasePolicy" -}}
{{- printf "%s-leases" (include "kubeflake.fullname" .) -}}
{{- end -}}

{{/* The leader-election Lease: part of the release, so helm uninstall removes it. */}}
{{- define "kubeflake.leaderLease" -}}
{{- printf "%s-leader" (include "kubeflake.fullname" .) -}}
{{- end -}}

{{- define "kubeflake.webhookService" -}}
{{- printf "%s-webhook" (include "kubeflake.fullname" .) -}}
{{- end -}}

{{/* The MutatingWebhookConfiguration; the operator patches caBundle into it by this name. */}}
{{- define "kubeflake.webhookConfig" -}}
{{- include "kubeflake.fullname" . -}}
{{- end -}}

{{/* The Secret the operator creates and rotates (self-managed certificates). Never templated. */}}
{{- define "kubeflake.webhookSecret" -}}
{{- if .Values.webhook.certManager.enabled -}}
{{- printf "%s-webhook-cert-manager" (include "kubeflake.fullname" .) -}}
{{- else -}}
{{- printf "%s-webhook-tls" (include "kubeflake.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
An image reference: "repository@digest" when a digest is set (the tag is then ignored: a
digest names exactly one image, and "repo:tag@digest" would let readers believe the tag
counts), else "repository:tag" with the chart's appVersion as the default tag.
*/}}
{{- define "kubeflake.image" -}}
{{- if .digest -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository (default .appVersion .tag) -}}
{{- end -}}
{{- end -}}

{{- define "kubeflake.operatorImage" -}}
{{- with .Values.operator.image -}}
{{- include "kubeflake.image" (dict "repository" .repository "tag" .tag "digest" .digest "appVersion" $.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "kubeflake.sidecarImage" -}}
{{- with .Values.sidecar.image -}}
{{- include "kubeflake.image" (dict "repository" .repository "tag" .tag "digest" .digest "appVersion" $.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}
