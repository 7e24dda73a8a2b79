package qmi

import (
	"errors"
	"fmt"
	"strconv"
)

// Wire sizes and markers.
const (
	// Marker is the I/F type byte that starts every QMUX frame.
	Marker = 0x01
	// QMUXHeaderLen is the I/F type byte plus the QMUX header (length,
	// control flags, service, client id).
	QMUXHeaderLen = 6
	// CTLHeaderLen is the size of a CTL SDU header.
	CTLHeaderLen = 6
	// ServiceHeaderLen is the size of the SDU header of other services.
	ServiceHeaderLen = 7
	// TLVHeaderLen is the size of a TLV's type and length.
	TLVHeaderLen = 3
	// MaxFrameLen is the largest frame the 16-bit QMUX length allows.
	MaxFrameLen = 1 + 0xFFFF
)

// QMUX control flags.
const (
	// QMUXFromHost is the control flags byte of a host-to-modem frame.
	QMUXFromHost = 0x00
	// QMUXFromModem is the control flags byte a modem sets on its frames
	// (the "service" sender bit).
	QMUXFromModem = 0x80
)

// SDU flag bits.
const (
	ctlFlagResponse   = 0x01
	ctlFlagIndication = 0x02
	svcFlagCompound   = 0x01
	svcFlagResponse   = 0x02
	svcFlagIndication = 0x04
)

// BroadcastClient is the client id of an indication sent to every client
// of a service.
const BroadcastClient = 0xFF

// MsgType says whether a message is a request, a response or an
// indication. Its encoding in the SDU flags differs between CTL and the
// other services; Frame.Type and Header hide that.
type MsgType uint8

// Message types.
const (
	Request MsgType = iota
	Response
	Indication
)

// String returns "request", "response" or "indication".
func (t MsgType) String() string {
	switch t {
	case Request:
		return "request"
	case Response:
		return "response"
	case Indication:
		return "indication"
	}
	return "MsgType(" + strconv.Itoa(int(t)) + ")"
}

// sduFlags encodes t for service s.
func (t MsgType) sduFlags(s Service) uint8 {
	switch {
	case t == Response && s == CTL:
		return ctlFlagResponse
	case t == Indication && s == CTL:
		return ctlFlagIndication
	case t == Response:
		return svcFlagResponse
	case t == Indication:
		return svcFlagIndication
	}
	return 0
}

// typeOf decodes SDU flags of service s. Indication wins over response
// when both bits are set, as libqmi checks indications first.
func typeOf(s Service, flags uint8) MsgType {
	if s == CTL {
		switch {
		case flags&ctlFlagIndication != 0:
			return Indication
		case flags&ctlFlagResponse != 0:
			return Response
		}
		return Request
	}
	switch {
	case flags&svcFlagIndication != 0:
		return Indication
	case flags&svcFlagResponse != 0:
		return Response
	}
	return Request
}

// Service is a QMI service number (the QMUX header's service byte).
type Service uint8

// Services (libqmi's QmiService numbering).
const (
	CTL   Service = 0x00
	WDS   Service = 0x01
	DMS   Service = 0x02
	NAS   Service = 0x03
	QOS   Service = 0x04
	WMS   Service = 0x05
	PDS   Service = 0x06
	AUTH  Service = 0x07
	AT    Service = 0x08
	VOICE Service = 0x09
	CAT2  Service = 0x0A
	UIM   Service = 0x0B
	PBM   Service = 0x0C
	LOC   Service = 0x10
	SAR   Service = 0x11
	IMS   Service = 0x12
	WDA   Service = 0x1A
	PDC   Service = 0x24
	DSD   Service = 0x2A
	DPM   Service = 0x2F
	OMA   Service = 0xE2
)

var serviceNames = map[Service]string{
	CTL: "CTL", WDS: "WDS", DMS: "DMS", NAS: "NAS", QOS: "QOS", WMS: "WMS",
	PDS: "PDS", AUTH: "AUTH", AT: "AT", VOICE: "VOICE", CAT2: "CAT2", UIM: "UIM",
	PBM: "PBM", LOC: "LOC", SAR: "SAR", IMS: "IMS", WDA: "WDA", PDC: "PDC",
	DSD: "DSD", DPM: "DPM", OMA: "OMA",
}

// String returns the service's name, e.g. "WDS", or "Service(0x2b)".
func (s Service) String() string {
	if n, ok := serviceNames[s]; ok {
		return n
	}
	return fmt.Sprintf("Service(0x%02x)", uint8(s))
}

// MessageID is a message id within a service.
type MessageID uint16

// Message ids common to all services.
const (
	GetSupportedMessages MessageID = 0x001E
)

// CTL message ids.
const (
	CTLSetInstanceID     MessageID = 0x0020
	CTLGetVersionInfo    MessageID = 0x0021
	CTLAllocateCID       MessageID = 0x0022
	CTLReleaseCID        MessageID = 0x0023
	CTLSetDataFormat     MessageID = 0x0026
	CTLSync              MessageID = 0x0027
	CTLInternalProxyOpen MessageID = 0xFF00 // libqmi-private, between a client and qmi-proxy
)

// DMS message ids.
const (
	DMSReset               MessageID = 0x0000
	DMSSetEventReport      MessageID = 0x0001 // also the EVENT_REPORT indication
	DMSGetCapabilities     MessageID = 0x0020
	DMSGetManufacturer     MessageID = 0x0021
	DMSGetModel            MessageID = 0x0022
	DMSGetRevision         MessageID = 0x0023
	DMSGetMSISDN           MessageID = 0x0024
	DMSGetIDs              MessageID = 0x0025
	DMSGetPowerState       MessageID = 0x0026
	DMSUIMVerifyPIN        MessageID = 0x0028
	DMSUIMGetPINStatus     MessageID = 0x002B
	DMSGetHardwareRevision MessageID = 0x002C
	DMSGetOperatingMode    MessageID = 0x002D
	DMSSetOperatingMode    MessageID = 0x002E
	DMSGetTime             MessageID = 0x002F
	DMSGetPRLVersion       MessageID = 0x0030
	DMSGetActivationState  MessageID = 0x0031
	DMSUIMGetICCID         MessageID = 0x003C
	DMSUIMGetCKStatus      MessageID = 0x0040
	DMSUIMGetIMSI          MessageID = 0x0043
	DMSUIMGetState         MessageID = 0x0044
	DMSGetBandCapabilities MessageID = 0x0045
	DMSGetFactorySKU       MessageID = 0x0046
	DMSListStoredImages    MessageID = 0x0049
	DMSGetStoredImageInfo  MessageID = 0x004C
	DMSGetSoftwareVersion  MessageID = 0x0051
	DMSGetMACAddress       MessageID = 0x005C
)

// NAS message ids.
const (
	NASReset                        MessageID = 0x0000
	NASAbort                        MessageID = 0x0001
	NASSetEventReport               MessageID = 0x0002 // also the EVENT_REPORT indication
	NASRegisterIndications          MessageID = 0x0003
	NASGetSignalStrength            MessageID = 0x0020
	NASNetworkScan                  MessageID = 0x0021
	NASInitiateNetworkRegister      MessageID = 0x0022
	NASAttachDetach                 MessageID = 0x0023
	NASGetServingSystem             MessageID = 0x0024 // also the SERVING_SYSTEM indication
	NASGetHomeNetwork               MessageID = 0x0025
	NASGetPreferredNetworks         MessageID = 0x0026
	NASGetTechnologyPreference      MessageID = 0x002B
	NASGetRFBandInformation         MessageID = 0x0031
	NASSetSystemSelectionPreference MessageID = 0x0033
	NASGetSystemSelectionPreference MessageID = 0x0034
	NASGetOperatorName              MessageID = 0x0039
	NASOperatorNameIndication       MessageID = 0x003A
	NASGetCellLocationInfo          MessageID = 0x0043
	NASGetPLMNName                  MessageID = 0x0044
	NASNetworkTimeIndication        MessageID = 0x004C
	NASGetSystemInfo                MessageID = 0x004D
	NASSystemInfoIndication         MessageID = 0x004E
	NASGetSignalInfo                MessageID = 0x004F
	NASConfigSignalInfo             MessageID = 0x0050
	NASSignalInfoIndication         MessageID = 0x0051
	NASGetTxRxInfo                  MessageID = 0x005A
	NASNetworkRejectIndication      MessageID = 0x0068
	NASConfigSignalInfoV2           MessageID = 0x006C
	NASGetDRX                       MessageID = 0x0089
	NASGetLTECphyCAInfo             MessageID = 0x00AC
)

// WDS message ids.
const (
	WDSReset                   MessageID = 0x0000
	WDSSetEventReport          MessageID = 0x0001 // also the EVENT_REPORT indication
	WDSAbort                   MessageID = 0x0002
	WDSIndicationRegister      MessageID = 0x0003
	WDSStartNetwork            MessageID = 0x0020
	WDSStopNetwork             MessageID = 0x0021
	WDSGetPacketServiceStatus  MessageID = 0x0022 // also the PACKET_SERVICE_STATUS indication
	WDSGetChannelRates         MessageID = 0x0023
	WDSGetPacketStatistics     MessageID = 0x0024
	WDSGetProfileList          MessageID = 0x002A
	WDSGetProfileSettings      MessageID = 0x002B
	WDSGetDefaultSettings      MessageID = 0x002C
	WDSGetCurrentSettings      MessageID = 0x002D
	WDSGetDormancyStatus       MessageID = 0x0030
	WDSGetAutoconnectSettings  MessageID = 0x0034
	WDSGetDataBearerTechnology MessageID = 0x0037
	WDSGetCurrentDataBearer    MessageID = 0x0044
	WDSGetDefaultProfileNumber MessageID = 0x0049
	WDSSetIPFamily             MessageID = 0x004D
	WDSSetAutoconnectSettings  MessageID = 0x0051
	WDSGetLTEAttachParameters  MessageID = 0x0085
	WDSBindDataPort            MessageID = 0x0089
	WDSExtendedIPConfigInd     MessageID = 0x008C
	WDSGetMaxLTEAttachPDNNum   MessageID = 0x0092
	WDSGetLTEAttachPDNList     MessageID = 0x0094
	WDSBindMuxDataPort         MessageID = 0x00A2
)

// WDA message ids.
const (
	WDASetDataFormat MessageID = 0x0020
	WDAGetDataFormat MessageID = 0x0021
)

// UIM message ids.
const (
	UIMReadTransparent   MessageID = 0x0020
	UIMReadRecord        MessageID = 0x0021
	UIMGetFileAttributes MessageID = 0x0024
	UIMRegisterEvents    MessageID = 0x002E
	UIMGetCardStatus     MessageID = 0x002F
	UIMGetSlotStatus     MessageID = 0x0047
)

type svcMsg struct {
	s  Service
	id MessageID
}

var messageNames = map[svcMsg]string{
	{CTL, CTLSetInstanceID}:                "SET_INSTANCE_ID",
	{CTL, CTLGetVersionInfo}:               "GET_VERSION_INFO",
	{CTL, CTLAllocateCID}:                  "ALLOCATE_CID",
	{CTL, CTLReleaseCID}:                   "RELEASE_CID",
	{CTL, CTLSetDataFormat}:                "SET_DATA_FORMAT",
	{CTL, CTLSync}:                         "SYNC",
	{CTL, CTLInternalProxyOpen}:            "INTERNAL_PROXY_OPEN",
	{DMS, DMSReset}:                        "RESET",
	{DMS, DMSSetEventReport}:               "SET_EVENT_REPORT",
	{DMS, DMSGetCapabilities}:              "GET_CAPABILITIES",
	{DMS, DMSGetManufacturer}:              "GET_MANUFACTURER",
	{DMS, DMSGetModel}:                     "GET_MODEL",
	{DMS, DMSGetRevision}:                  "GET_REVISION",
	{DMS, DMSGetMSISDN}:                    "GET_MSISDN",
	{DMS, DMSGetIDs}:                       "GET_IDS",
	{DMS, DMSGetPowerState}:                "GET_POWER_STATE",
	{DMS, DMSUIMVerifyPIN}:                 "UIM_VERIFY_PIN",
	{DMS, DMSUIMGetPINStatus}:              "UIM_GET_PIN_STATUS",
	{DMS, DMSGetHardwareRevision}:          "GET_HARDWARE_REVISION",
	{DMS, DMSGetOperatingMode}:             "GET_OPERATING_MODE",
	{DMS, DMSSetOperatingMode}:             "SET_OPERATING_MODE",
	{DMS, DMSGetTime}:                      "GET_TIME",
	{DMS, DMSGetPRLVersion}:                "GET_PRL_VERSION",
	{DMS, DMSGetActivationState}:           "GET_ACTIVATION_STATE",
	{DMS, DMSUIMGetICCID}:                  "UIM_GET_ICCID",
	{DMS, DMSUIMGetCKStatus}:               "UIM_GET_CK_STATUS",
	{DMS, DMSUIMGetIMSI}:                   "UIM_GET_IMSI",
	{DMS, DMSUIMGetState}:                  "UIM_GET_STATE",
	{DMS, DMSGetBandCapabilities}:          "GET_BAND_CAPABILITIES",
	{DMS, DMSGetFactorySKU}:                "GET_FACTORY_SKU",
	{DMS, DMSListStoredImages}:             "LIST_STORED_IMAGES",
	{DMS, DMSGetStoredImageInfo}:           "GET_STORED_IMAGE_INFO",
	{DMS, DMSGetSoftwareVersion}:           "GET_SOFTWARE_VERSION",
	{DMS, DMSGetMACAddress}:                "GET_MAC_ADDRESS",
	{NAS, NASReset}:                        "RESET",
	{NAS, NASAbort}:                        "ABORT",
	{NAS, NASSetEventReport}:               "SET_EVENT_REPORT",
	{NAS, NASRegisterIndications}:          "REGISTER_INDICATIONS",
	{NAS, NASGetSignalStrength}:            "GET_SIGNAL_STRENGTH",
	{NAS, NASNetworkScan}:                  "NETWORK_SCAN",
	{NAS, NASInitiateNetworkRegister}:      "INITIATE_NETWORK_REGISTER",
	{NAS, NASAttachDetach}:                 "ATTACH_DETACH",
	{NAS, NASGetServingSystem}:             "GET_SERVING_SYSTEM",
	{NAS, NASGetHomeNetwork}:               "GET_HOME_NETWORK",
	{NAS, NASGetPreferredNetworks}:         "GET_PREFERRED_NETWORKS",
	{NAS, NASGetTechnologyPreference}:      "GET_TECHNOLOGY_PREFERENCE",
	{NAS, NASGetRFBandInformation}:         "GET_RF_BAND_INFORMATION",
	{NAS, NASSetSystemSelectionPreference}: "SET_SYSTEM_SELECTION_PREFERENCE",
	{NAS, NASGetSystemSelectionPreference}: "GET_SYSTEM_SELECTION_PREFERENCE",
	{NAS, NASGetOperatorName}:              "GET_OPERATOR_NAME",
	{NAS, NASOperatorNameIndication}:       "OPERATOR_NAME",
	{NAS, NASGetCellLocationInfo}:          "GET_CELL_LOCATION_INFO",
	{NAS, NASGetPLMNName}:                  "GET_PLMN_NAME",
	{NAS, NASNetworkTimeIndication}:        "NETWORK_TIME",
	{NAS, NASGetSystemInfo}:                "GET_SYSTEM_INFO",
	{NAS, NASSystemInfoIndication}:         "SYSTEM_INFO",
	{NAS, NASGetSignalInfo}:                "GET_SIGNAL_INFO",
	{NAS, NASConfigSignalInfo}:             "CONFIG_SIGNAL_INFO",
	{NAS, NASSignalInfoIndication}:         "SIGNAL_INFO",
	{NAS, NASGetTxRxInfo}:                  "GET_TX_RX_INFO",
	{NAS, NASNetworkRejectIndication}:      "NETWORK_REJECT",
	{NAS, NASConfigSignalInfoV2}:           "CONFIG_SIGNAL_INFO_V2",
	{NAS, NASGetDRX}:                       "GET_DRX",
	{NAS, NASGetLTECphyCAInfo}:             "GET_LTE_CPHY_CA_INFO",
	{WDS, WDSReset}:                        "RESET",
	{WDS, WDSSetEventReport}:               "SET_EVENT_REPORT",
	{WDS, WDSAbort}:                        "ABORT",
	{WDS, WDSIndicationRegister}:           "INDICATION_REGISTER",
	{WDS, WDSStartNetwork}:                 "START_NETWORK",
	{WDS, WDSStopNetwork}:                  "STOP_NETWORK",
	{WDS, WDSGetPacketServiceStatus}:       "GET_PACKET_SERVICE_STATUS",
	{WDS, WDSGetChannelRates}:              "GET_CHANNEL_RATES",
	{WDS, WDSGetPacketStatistics}:          "GET_PACKET_STATISTICS",
	{WDS, WDSGetProfileList}:               "GET_PROFILE_LIST",
	{WDS, WDSGetProfileSettings}:           "GET_PROFILE_SETTINGS",
	{WDS, WDSGetDefaultSettings}:           "GET_DEFAULT_SETTINGS",
	{WDS, WDSGetCurrentSettings}:           "GET_CURRENT_SETTINGS",
	{WDS, WDSGetDormancyStatus}:            "GET_DORMANCY_STATUS",
	{WDS, WDSGetAutoconnectSettings}:       "GET_AUTOCONNECT_SETTINGS",
	{WDS, WDSGetDataBearerTechnology}:      "GET_DATA_BEARER_TECHNOLOGY",
	{WDS, WDSGetCurrentDataBearer}:         "GET_CURRENT_DATA_BEARER_TECHNOLOGY",
	{WDS, WDSGetDefaultProfileNumber}:      "GET_DEFAULT_PROFILE_NUMBER",
	{WDS, WDSSetIPFamily}:                  "SET_IP_FAMILY",
	{WDS, WDSSetAutoconnectSettings}:       "SET_AUTOCONNECT_SETTINGS",
	{WDS, WDSGetLTEAttachParameters}:       "GET_LTE_ATTACH_PARAMETERS",
	{WDS, WDSBindDataPort}:                 "BIND_DATA_PORT",
	{WDS, WDSExtendedIPConfigInd}:          "EXTENDED_IP_CONFIG",
	{WDS, WDSGetMaxLTEAttachPDNNum}:        "GET_MAX_LTE_ATTACH_PDN_NUMBER",
	{WDS, WDSGetLTEAttachPDNList}:          "GET_LTE_ATTACH_PDN_LIST",
	{WDS, WDSBindMuxDataPort}:              "BIND_MUX_DATA_PORT",
	{WDA, WDASetDataFormat}:                "SET_DATA_FORMAT",
	{WDA, WDAGetDataFormat}:                "GET_DATA_FORMAT",
	{UIM, UIMReadTransparent}:              "READ_TRANSPARENT",
	{UIM, UIMReadRecord}:                   "READ_RECORD",
	{UIM, UIMGetFileAttributes}:            "GET_FILE_ATTRIBUTES",
	{UIM, UIMRegisterEvents}:               "REGISTER_EVENTS",
	{UIM, UIMGetCardStatus}:                "GET_CARD_STATUS",
	{UIM, UIMGetSlotStatus}:                "GET_SLOT_STATUS",
}

// MessageName returns the name of message id in service s, e.g.
// "GET_VERSION_INFO", or "0x0055" when the package does not name it.
func (s Service) MessageName(id MessageID) string {
	if id == GetSupportedMessages && s != CTL {
		return "GET_SUPPORTED_MESSAGES"
	}
	if n, ok := messageNames[svcMsg{s, id}]; ok {
		return n
	}
	return fmt.Sprintf("0x%04x", uint16(id))
}

// Result statuses (the first half of the result TLV).
const (
	StatusSuccess uint16 = 0
	StatusFailure uint16 = 1
)

// ErrorCode is a QMI protocol error code (the second half of the result
// TLV).
type ErrorCode uint16

// Protocol error codes (libqmi's QmiProtocolError numbering).
const (
	ErrNone                      ErrorCode = 0
	ErrMalformedMessage          ErrorCode = 1
	ErrNoMemory                  ErrorCode = 2
	ErrInternal                  ErrorCode = 3
	ErrAborted                   ErrorCode = 4
	ErrClientIDsExhausted        ErrorCode = 5
	ErrInvalidClientID           ErrorCode = 7
	ErrInvalidHandle             ErrorCode = 9
	ErrInvalidProfile            ErrorCode = 10
	ErrNoNetworkFound            ErrorCode = 13
	ErrCallFailed                ErrorCode = 14
	ErrOutOfCall                 ErrorCode = 15
	ErrNotProvisioned            ErrorCode = 16
	ErrMissingArgument           ErrorCode = 17
	ErrArgumentTooLong           ErrorCode = 19
	ErrInvalidTransactionID      ErrorCode = 22
	ErrDeviceInUse               ErrorCode = 23
	ErrNoEffect                  ErrorCode = 26
	ErrInvalidPDPType            ErrorCode = 28
	ErrInvalidServiceType        ErrorCode = 31
	ErrGeneralError              ErrorCode = 46
	ErrInvalidDataFormat         ErrorCode = 45
	ErrInvalidArgument           ErrorCode = 48
	ErrDeviceNotReady            ErrorCode = 52
	ErrNetworkNotReady           ErrorCode = 53
	ErrInvalidTransition         ErrorCode = 60
	ErrInvalidIPFamilyPreference ErrorCode = 64
	ErrInvalidOperation          ErrorCode = 70
	ErrInvalidQMICommand         ErrorCode = 71
	ErrInformationUnavailable    ErrorCode = 74
	ErrNotSupported              ErrorCode = 94
)

var errorNames = map[ErrorCode]string{
	ErrNone: "None", ErrMalformedMessage: "MalformedMessage", ErrNoMemory: "NoMemory",
	ErrInternal: "Internal", ErrAborted: "Aborted", ErrClientIDsExhausted: "ClientIdsExhausted",
	ErrInvalidClientID: "InvalidClientId", ErrInvalidHandle: "InvalidHandle",
	ErrInvalidProfile: "InvalidProfile", ErrNoNetworkFound: "NoNetworkFound",
	ErrCallFailed: "CallFailed", ErrOutOfCall: "OutOfCall", ErrNotProvisioned: "NotProvisioned",
	ErrMissingArgument: "MissingArgument", ErrArgumentTooLong: "ArgumentTooLong",
	ErrInvalidTransactionID: "InvalidTransactionId", ErrDeviceInUse: "DeviceInUse",
	ErrNoEffect: "NoEffect", ErrInvalidPDPType: "InvalidPdpType",
	ErrInvalidServiceType: "InvalidServiceType", ErrGeneralError: "GeneralError",
	ErrInvalidDataFormat: "InvalidDataFormat", ErrInvalidArgument: "InvalidArgument",
	ErrDeviceNotReady: "DeviceNotReady", ErrNetworkNotReady: "NetworkNotReady",
	ErrInvalidTransition: "InvalidTransition", ErrInvalidIPFamilyPreference: "InvalidIpFamilyPreference",
	ErrInvalidOperation: "InvalidOperation", ErrInvalidQMICommand: "InvalidQmiCommand",
	ErrInformationUnavailable: "InformationUnavailable", ErrNotSupported: "NotSupported",
}

// String returns libqmi's nickname of the code, e.g. "InvalidQmiCommand",
// or "ErrorCode(n)".
func (c ErrorCode) String() string {
	if n, ok := errorNames[c]; ok {
		return n
	}
	return "ErrorCode(" + strconv.Itoa(int(c)) + ")"
}

// Result is the content of the result TLV 0x02.
type Result struct {
	Status uint16
	Code   ErrorCode
}

// Success is the result of a successful request.
var Success = Result{}

// Failure returns a failed result with code c.
func Failure(c ErrorCode) Result { return Result{Status: StatusFailure, Code: c} }

// OK reports whether the result says success.
func (r Result) OK() bool { return r.Status == StatusSuccess }

// Err returns nil for success and a *ProtocolError otherwise.
func (r Result) Err() error {
	if r.OK() {
		return nil
	}
	return &ProtocolError{Code: r.Code}
}

// ProtocolError is a failed result reported by the other side.
type ProtocolError struct {
	Code ErrorCode
}

func (e *ProtocolError) Error() string { return "qmi: protocol error " + e.Code.String() }

// TLV types shared by all services.
const (
	// TLVResult is the type of the result TLV of every response.
	TLVResult = 0x02
)

// Errors of parsing and building. Every rejected frame matches exactly one
// of the parse errors with errors.Is.
var (
	// ErrShort: fewer bytes than the I/F type and QMUX header.
	ErrShort = errors.New("qmi: frame shorter than the QMUX header")
	// ErrMarker: the first byte is not the I/F type 0x01.
	ErrMarker = errors.New("qmi: bad I/F type byte")
	// ErrQMUXLength: the QMUX length is not the buffer's length minus one.
	ErrQMUXLength = errors.New("qmi: QMUX length does not match the frame")
	// ErrSDUHeader: the QMUX length leaves no room for the SDU header.
	ErrSDUHeader = errors.New("qmi: frame shorter than the SDU header")
	// ErrTLVLength: the SDU's TLV length is not what follows its header.
	ErrTLVLength = errors.New("qmi: SDU TLV length does not match the frame")
	// ErrTLVOverrun: a TLV's header or value runs past the end of the SDU.
	ErrTLVOverrun = errors.New("qmi: TLV runs past the end of the SDU")

	// ErrNoResult: a response without the result TLV.
	ErrNoResult = errors.New("qmi: response without result TLV")
	// ErrValue: a TLV value shorter (or longer) than its format needs.
	ErrValue = errors.New("qmi: TLV value of the wrong size")

	// ErrTooLarge: a built frame or TLV exceeds the 16-bit lengths.
	ErrTooLarge = errors.New("qmi: message too large")
	// ErrBuilder: the builder was used out of order (no Start, a TLV left
	// open, an End without Begin, a CTL transaction id above 255).
	ErrBuilder = errors.New("qmi: builder misuse")
)
