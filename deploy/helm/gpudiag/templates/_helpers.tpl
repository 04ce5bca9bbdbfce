{{/* The chart's name, or nameOverride: the app.kubernetes.io/name label. */}}
{{- define "gpudiag.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' name: the release's name when it holds the chart's name (helm
install gpudiag: gpudiag, as in the kustomize base), else <release>-<name>.
*/}}
{{- define "gpudiag.fullname" -}}
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

{{- define "gpudiag.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* What the DaemonSet, the Service and the ServiceMonitor select by. */}}
{{- define "gpudiag.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpudiag.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpudiag.labels" -}}
{{ include "gpudiag.selectorLabels" . }}
app.kubernetes.io/part-of: gpudiag
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "gpudiag.chart" . }}
{{- end }}

{{- define "gpudiag.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Where the web config Secret is mounted, and its file. */}}
{{- define "gpudiag.webConfigDir" -}}/etc/gpudiag/web{{- end }}
{{- define "gpudiag.webConfigFile" -}}web-config.yml{{- end }}

{{/* "true" when the web config turns TLS on. */}}
{{- define "gpudiag.tls" -}}
{{- if and .Values.webConfig.config (hasKey .Values.webConfig.config "tls_server_config") }}true{{ end }}
{{- end }}

{{/*
"true" when the cluster serves the Prometheus Operator's API
(monitoring.coreos.com/v1): the ServiceMonitor or PodMonitor and the
PrometheusRule are rendered only then, so that an install on a cluster
without the operator's CRDs does not fail on them. helm template knows no
cluster: give it --api-versions monitoring.coreos.com/v1.
*/}}
{{- define "gpudiag.operatorAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- end }}
