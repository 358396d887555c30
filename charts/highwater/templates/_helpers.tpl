{{/* Names, labels and the pieces every workload shares. */}}

{{- define "highwater.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "highwater.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "highwater.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: name and instance; callers add app.kubernetes.io/component. */}}
{{- define "highwater.selectorLabels" -}}
app.kubernetes.io/name: {{ include "highwater.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "highwater.labels" -}}
helm.sh/chart: {{ include "highwater.chart" . }}
{{ include "highwater.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: highwater
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "highwater.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "highwater.operator.fullname" -}}
{{- printf "%s-operator" (include "highwater.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "highwater.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (include "highwater.operator.fullname" .) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "highwater.dispatcher.serviceAccountName" -}}
{{- if .Values.dispatchers.serviceAccount.create -}}
{{- default (printf "%s-dispatcher" (include "highwater.fullname" .)) .Values.dispatchers.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.dispatchers.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Deployment (and Service) name of a dispatcher group: (dict "root" $ "group" $g). */}}
{{- define "highwater.dispatcher.fullname" -}}
{{- printf "%s-dispatcher-%s" (include "highwater.fullname" .root) .group.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The DATABASE_URL environment variable, from the existing Secret. */}}
{{- define "highwater.databaseEnv" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.secretKey }}
{{- end -}}

{{- define "highwater.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext -}}
{{- end -}}

{{- define "highwater.securityContext" -}}
{{- toYaml .Values.securityContext -}}
{{- end -}}

{{/* Fails rendering with the fix when a required value is missing or values contradict. */}}
{{- define "highwater.validate" -}}
{{- if not .Values.database.existingSecret -}}
{{- fail "database.existingSecret is required: create a Secret holding the PostgreSQL URL (kubectl create secret generic highwater-db --from-literal=url=postgres://USER:PASSWORD@HOST:5432/DB) and pass --set database.existingSecret=highwater-db" -}}
{{- end -}}
{{- if and (eq .Values.migrations.owner "operator") (not .Values.operator.enabled) -}}
{{- fail "migrations.owner=operator needs operator.enabled=true: set migrations.owner=hook (or none)" -}}
{{- end -}}
{{- $seen := dict -}}
{{- range .Values.dispatchers.groups -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "dispatchers.groups: the group %q is listed twice" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- end -}}
{{- if and .Values.retention.enabled (eq .Values.retention.mode "prune") -}}
{{- if and .Values.retention.allStreamTypes .Values.retention.streamTypes -}}
{{- fail "retention: set either streamTypes or allStreamTypes=true, not both" -}}
{{- end -}}
{{- if not (or .Values.retention.allStreamTypes .Values.retention.streamTypes) -}}
{{- fail "retention.enabled needs the stream types to prune: retention.streamTypes={order,payment} or retention.allStreamTypes=true (or retention.mode=dropPartitions, which drops whole partitions of every stream type)" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.monitoring.scrape.enabled (eq .Values.monitoring.scrape.kind "ServiceMonitor") (not .Values.dispatchers.service.enabled) -}}
{{- fail "monitoring.scrape.kind=ServiceMonitor needs dispatchers.service.enabled=true (or use kind PodMonitor)" -}}
{{- end -}}
{{- end -}}
